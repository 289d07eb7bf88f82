package completion_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/completion"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

func run(t *testing.T, client *fake.Clientset, args ...string) (int, string, string) {
	t.Helper()
	r := cmdtest.Cmd{NS: "team", Client: client, RandomName: "abcde"}.Run(context.Background(), args...)
	return r.Code, r.Stdout, r.Stderr
}

func TestJobNamesAreThePluginsJobsInTheNamespace(t *testing.T) {
	client := fake.NewClientset(fixture.Job("train-1").Namespace("team").Label("app.kubernetes.io/managed-by", "kubectl-tao").Obj(), fixture.Job("train-2").Namespace("team").Label("app.kubernetes.io/managed-by", "kubectl-tao").Obj(),
		fixture.Job("someone-elses").Namespace("team").Obj(), fixture.Job("train-3").Namespace("other").Label("app.kubernetes.io/managed-by", "kubectl-tao").Obj())
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"__complete", "status", ""}, "train-1\ntrain-2\n:4\n"},
		{[]string{"__complete", "logs", "train-2"}, "train-2\n:4\n"},
		{[]string{"__complete", "wait", "job/t"}, "job/train-1\njob/train-2\n:4\n"},
		{[]string{"__complete", "status", "train-1", ""}, ":4\n"}, // one JOB only
		{[]string{"__complete", "delete", "train-1", ""}, "train-2\n:4\n"},
	} {
		code, out, _ := run(t, client, c.args...)
		if code != 0 || !strings.HasPrefix(out, c.want) {
			t.Errorf("%v: exit %d, stdout %q, want %q", c.args, code, out, c.want)
		}
	}
}

func TestJobNameCompletionIsOnePagedLabelledList(t *testing.T) {
	client := fake.NewClientset(fixture.Job("train-1").Namespace("team").Label("app.kubernetes.io/managed-by", "kubectl-tao").Obj())
	if _, out, _ := run(t, client, "__complete", "status", ""); !strings.HasPrefix(out, "train-1\n") {
		t.Fatalf("stdout %q", out)
	}
	acts := client.Actions()
	if len(acts) != 1 {
		t.Fatalf("want one request, got %v", acts)
	}
	l, ok := acts[0].(k8stesting.ListActionImpl)
	if !ok || l.GetResource().Resource != "jobs" || l.GetNamespace() != "team" ||
		l.GetListRestrictions().Labels.String() != "app.kubernetes.io/managed-by=kubectl-tao" || l.ListOptions.Limit != 500 {
		t.Fatalf("request %#v", acts[0])
	}
}

func TestCompletionErrorsCompleteNothing(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("list", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, os.ErrPermission
	})
	code, out, errOut := run(t, client, "__complete", "status", "")
	if code != 0 || !strings.HasPrefix(out, ":4\n") || strings.Contains(errOut, "permission") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestNamespaceAndContextFlags(t *testing.T) {
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}})
	if _, out, _ := run(t, client, "__complete", "status", "-n", "te"); !strings.HasPrefix(out, "team\n:4\n") {
		t.Errorf("-n: %q", out)
	}
	if _, out, _ := run(t, client, "__complete", "list", "--namespace", ""); !strings.HasPrefix(out, "kube-system\nteam\n:4\n") {
		t.Errorf("--namespace: %q", out)
	}
	kc := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c1, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u1, user: {}}]
contexts:
- {name: prod, context: {cluster: c1, user: u1}}
- {name: dev, context: {cluster: c1, user: u1}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for flag, want := range map[string]string{"--context": "dev\nprod\n:4\n", "--cluster": "c1\n:4\n", "--user": "u1\n:4\n"} {
		if _, out, _ := run(t, client, "__complete", "--kubeconfig", kc, "status", flag, ""); !strings.HasPrefix(out, want) {
			t.Errorf("%s: %q, want %q", flag, out, want)
		}
	}
}

func TestCompletionCommand(t *testing.T) {
	client := fake.NewClientset()
	for shell, want := range map[string]string{
		"bash":       "__start_kubectl-tao",
		"zsh":        "#compdef kubectl-tao",
		"fish":       "complete -c kubectl-tao",
		"powershell": "Register-ArgumentCompleter -CommandName 'kubectl-tao'",
		"kubectl":    completion.InstallLine + "\n",
	} {
		code, out, errOut := run(t, client, "completion", shell)
		if code != 0 || errOut != "" || !strings.Contains(out, want) {
			t.Errorf("completion %s: exit %d, stderr %q, stdout lacks %q", shell, code, errOut, want)
		}
	}
	if code, _, errOut := run(t, client, "completion"); code != 2 || !strings.Contains(errOut, "expected one shell") {
		t.Errorf("no shell: exit %d, %q", code, errOut)
	}
	if code, _, errOut := run(t, client, "completion", "tcsh"); code != 2 || !strings.Contains(errOut, `unsupported shell "tcsh"`) {
		t.Errorf("tcsh: exit %d, %q", code, errOut)
	}
}

// The install line must write exactly the script the archives ship.
func TestInstallLineWritesTheShippedScript(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", completion.InstallLine)
	cmd.Env = []string{"KREW_ROOT=" + root, "PATH=" + os.Getenv("PATH")}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	p := filepath.Join(root, "bin", completion.KubectlScriptName)
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != completion.KubectlScript {
		t.Errorf("installed %q, archives ship %q", got, completion.KubectlScript)
	}
	if st, _ := os.Stat(p); st.Mode()&0o111 == 0 {
		t.Errorf("installed script is not executable: %v", st.Mode())
	}
}
