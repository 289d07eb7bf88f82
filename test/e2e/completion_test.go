//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/completion"
)

// pluginPath is a PATH on which kubectl finds the built plugin and its kubectl_complete-tao
// script, as after an install from a release archive.
func pluginPath(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	abs, err := filepath.Abs(binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(abs, filepath.Join(dir, "kubectl-tao")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, completion.KubectlScriptName), []byte(completion.KubectlScript), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir + string(os.PathListSeparator) + os.Getenv("PATH")
}

// complete runs a completion request (name is kubectl or kubectl-tao) and returns the
// candidates and the directive line.
func complete(t *testing.T, path, name string, args ...string) ([]string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exe := name
	// exec resolves the name on this process's PATH, not the command's: look it up on ours.
	for _, dir := range filepath.SplitList(path) {
		if p := filepath.Join(dir, name); fileExists(p) {
			exe = p
			break
		}
	}
	cmd := exec.CommandContext(ctx, exe, append([]string{"__complete"}, args...)...)
	cmd.Env = []string{"PATH=" + path, "HOME=" + os.Getenv("HOME"), "KUBECONFIG=" + kubeconfig}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s __complete %v: %v\n%s%s", name, args, err, out.String(), errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var names []string
	for _, l := range lines[:len(lines)-1] {
		name, _, _ := strings.Cut(l, "\t") // drop descriptions
		names = append(names, name)
	}
	return names, lines[len(lines)-1]
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func has(list []string, want string) bool {
	for _, s := range list {
		if s == want {
			return true
		}
	}
	return false
}

func TestCompletionThroughKubectl(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		// CI needs kubectl anyway (make krew-check runs the plugin through it).
		if os.Getenv("CI") == "true" {
			t.Fatal("no kubectl on PATH under CI=true")
		}
		t.Skip("no kubectl on PATH")
	}
	ns := namespace(t)
	for name, labels := range map[string]map[string]string{
		"train-a":   {"app.kubernetes.io/managed-by": "kubectl-tao"},
		"train-b":   {"app.kubernetes.io/managed-by": "kubectl-tao"},
		"not-a-tao": nil,
	} {
		j := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec: batchv1.JobSpec{
				Suspend: ptr.To(true), // no pods: only the name matters here
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "c", Image: "busybox"}},
				}},
			},
		}
		if _, err := client.BatchV1().Jobs(ns).Create(context.Background(), j, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	path := pluginPath(t)

	for _, name := range []string{"kubectl", "kubectl-tao"} {
		args := func(a ...string) []string {
			if name == "kubectl" {
				return append([]string{"tao"}, a...)
			}
			return a
		}
		got, dir := complete(t, path, name, args("status", "-n", ns, "")...)
		if strings.Join(got, ",") != "train-a,train-b" || dir != ":4" {
			t.Errorf("%s: job names %v %s, want train-a,train-b :4", name, got, dir)
		}
		got, _ = complete(t, path, name, args("logs", "--namespace="+ns, "job/train-b")...)
		if strings.Join(got, ",") != "job/train-b" {
			t.Errorf("%s: job/ prefix: %v", name, got)
		}
		got, _ = complete(t, path, name, args("wait", "-n", "")...)
		if !has(got, ns) || !has(got, "kube-system") {
			t.Errorf("%s: namespaces %v lack %s", name, got, ns)
		}
		got, _ = complete(t, path, name, args("list", "--context", "")...)
		if len(got) == 0 {
			t.Errorf("%s: no contexts completed", name)
		}
		got, _ = complete(t, path, name, args("sta")...)
		if !has(got, "status") {
			t.Errorf("%s: subcommands %v lack status", name, got)
		}
	}
	// kubectl itself lists the plugin among its commands.
	if got, _ := complete(t, path, "kubectl", "ta"); !has(got, "tao") {
		t.Errorf("kubectl __complete ta: %v", got)
	}
}
