package submit_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
)

const (
	ngcKey  = "nvapi-UnitTestNgcKey0123456789"
	hfToken = "hf_UnitTestToken/With+Base64="
)

// keyShell is a submitting shell holding an NGC key, and a Hugging Face token under another name.
var keyShell = map[string]string{"NGC_KEY": ngcKey, "MY_HF": hfToken}

// noKeyLeak fails if either secret (or its base64) appears in text.
func noKeyLeak(t *testing.T, what, text string) {
	t.Helper()
	holdsNone(t, what, text, ngcKey, hfToken)
}

func secretEnvArgs(name string, extra ...string) []string {
	return append(append([]string{name, "--image", "img", "--gpus", "0", "--secret-env", "NGC_KEY", "--secret-env", "HF_TOKEN=MY_HF"}, extra...), "--", "true")
}

func TestSubmitSecretEnvCreatesAnOwnedSecret(t *testing.T) {
	c := newClient()
	r := runEnv(t, cmdtest.Cmd{NS: "ml", Client: c}, keyShell, secretEnvArgs("train")...)
	if r.Code != 0 || r.Stdout != "job.batch/train created\nsecret/train-env created\n" || r.Stderr != "" {
		t.Fatalf("got %+v", r)
	}
	if got := strings.Join(mutations(c), ","); got != "create jobs,create secrets,patch jobs" {
		t.Errorf("mutations = %s, want the Secret made while the Job is suspended", got)
	}
	ctx := context.Background()
	job, _ := c.BatchV1().Jobs("ml").Get(ctx, "train", metav1.GetOptions{})
	s, err := c.CoreV1().Secrets("ml").Get(ctx, "train-env", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if refs := s.OwnerReferences; len(refs) != 1 || refs[0].UID != job.UID || !*refs[0].Controller || !*refs[0].BlockOwnerDeletion {
		t.Errorf("owner references = %+v, want the Job", refs)
	}
	if string(s.Data["NGC_KEY"]) != ngcKey || string(s.Data["HF_TOKEN"]) != hfToken || len(s.Data) != 2 || !*s.Immutable {
		t.Errorf("secret = %+v", s)
	}
	refs := 0
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == "train-env" {
			refs++
		}
	}
	if refs != 2 {
		t.Errorf("env = %+v, want two secretKeyRefs to train-env", job.Spec.Template.Spec.Containers[0].Env)
	}
	requestsHoldNone(t, c, ngcKey, hfToken)
}

// Redaction in every -o format, dry run or not: the keys are shown, the values never.
func TestSubmitSecretEnvIsRedactedInEveryFormat(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dry-run=client", "-o", "yaml"}, "NGC_KEY: REDACTED"},
		{[]string{"--dry-run=client", "-o", "json"}, `"NGC_KEY": "REDACTED"`},
		{[]string{"--dry-run=client", "-o", "name"}, "secret/train-env"},
		{[]string{"--dry-run=client"}, "secret/train-env created (dry run)"},
		{[]string{"--dry-run=client", "-o", "jsonpath={.items[1].data}{.items[1].stringData}"}, `"HF_TOKEN":"REDACTED"`},
		{[]string{"--dry-run=client", "-o", "jsonpath-as-json={.items[1]}"}, `"REDACTED"`},
		{[]string{"--dry-run=client", "-o", "go-template={{range .items}}{{.data}}{{.stringData}}{{end}}"}, "NGC_KEY:REDACTED"},
		{[]string{"--dry-run=server", "-o", "yaml"}, "HF_TOKEN: REDACTED"},
		{[]string{"--dry-run=server", "-o", "json"}, `"HF_TOKEN": "REDACTED"`},
		{[]string{"-o", "yaml"}, "NGC_KEY: REDACTED"},
		{[]string{"-o", "json"}, `"NGC_KEY": "REDACTED"`},
		{[]string{"-o", "name"}, "secret/train-env"},
		{[]string{"-o", "jsonpath={.items[1].data}{.items[1].stringData}"}, `"NGC_KEY":"REDACTED"`},
	} {
		c := newClient()
		f := cmdtest.Cmd{Client: c}
		if tc.args[0] == "--dry-run=client" {
			f = cmdtest.Cmd{ClientErr: errors.New("no cluster for a client dry run")}
		}
		r := runEnv(t, f, keyShell, secretEnvArgs("train", tc.args...)...)
		if r.Code != 0 || !strings.Contains(r.Stdout, tc.want) {
			t.Errorf("%v: got %+v, want %q", tc.args, r, tc.want)
		}
		noKeyLeak(t, strings.Join(tc.args, " "), r.Stdout+r.Stderr)
	}
}

// An unset or empty variable, a value typed where a name belongs, and a credential as a plain
// --env: exit 2, nothing sent, no value echoed.
func TestSubmitSecretEnvUsageErrorsCreateNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"unset", map[string]string{"MY_HF": hfToken}, secretEnvArgs("train"),
			"--secret-env: $NGC_KEY is unset or empty in this shell: export it first (nothing was created)"},
		{"empty", map[string]string{"NGC_KEY": "", "MY_HF": ""}, secretEnvArgs("train"),
			"$NGC_KEY, $MY_HF are unset or empty in this shell"},
		{"value for a local name", keyShell, []string{"train", "--image", "img", "--secret-env", "NGC_KEY=" + ngcKey, "--", "true"},
			"LOCAL_NAME must be the name of a variable in this shell"},
		{"value for a name", keyShell, []string{"train", "--image", "img", "--secret-env", hfToken, "--", "true"},
			"expected NAME or NAME=LOCAL_NAME"},
		{"credential as --env", keyShell, []string{"train", "--image", "img", "--env", "NGC_KEY=" + ngcKey, "--", "true"},
			"--env NGC_KEY: that looks like a credential"},
		{"look-alike as --env", keyShell, []string{"train", "--image", "img", "--env", "HF_HUB_TOKEN=" + hfToken, "--", "true"},
			"export it and pass --secret-env HF_HUB_TOKEN instead (or --env-from-secret SECRET for a Secret that already exists); if it is not a secret, add --env-allow HF_HUB_TOKEN"},
		{"escape hatch refused for a known one", keyShell, []string{"train", "--image", "img", "--env", "NGC_KEY=" + ngcKey, "--env-allow", "NGC_KEY", "--", "true"},
			"--env-allow NGC_KEY: NGC_KEY is a credential, never a plain value"},
		{"in both", keyShell, []string{"train", "--image", "img", "--env", "NGC_KEY=x", "--secret-env", "NGC_KEY", "--", "true"},
			"NGC_KEY is given both as --env and as --secret-env"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient()
			r := runEnv(t, cmdtest.Cmd{Client: c}, tc.env, tc.args...)
			if r.Code != int(exitcode.Usage) || !strings.Contains(r.Stderr, tc.want) || r.Stdout != "" {
				t.Fatalf("got %+v, want exit 2 and %q", r, tc.want)
			}
			if len(c.Actions()) != 0 {
				t.Errorf("actions = %v, want none", c.Actions())
			}
			noKeyLeak(t, "the error", r.Stderr)
		})
	}
}

// --env-allow lets a name that only looks secret through, as a plain value.
func TestSubmitEnvAllow(t *testing.T) {
	c := newClient()
	r := runEnv(t, cmdtest.Cmd{Client: c}, nil, "train", "--image", "img", "--gpus", "0",
		"--env", "MAX_NEW_TOKEN=512", "--env-allow", "MAX_NEW_TOKEN", "--", "true")
	if r.Code != 0 || r.Stdout != "job.batch/train created\n" {
		t.Fatalf("got %+v", r)
	}
	job, _ := c.BatchV1().Jobs("default").Get(context.Background(), "train", metav1.GetOptions{})
	found := false
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		found = found || (e.Name == "MAX_NEW_TOKEN" && e.Value == "512")
	}
	if !found {
		t.Errorf("env = %+v", job.Spec.Template.Spec.Containers[0].Env)
	}
}

// A refused Secret create rolls the Job back, and the error quotes no value.
func TestSubmitSecretEnvFailedCreateLeavesNothing(t *testing.T) {
	c := newClient()
	c.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "train-env", errors.New("denied for "+ngcKey))
	})
	r := runEnv(t, cmdtest.Cmd{Client: c}, keyShell, secretEnvArgs("train")...)
	if r.Code != int(exitcode.Forbidden) || !strings.Contains(r.Stderr, "creating secret/train-env") || r.Stdout != "" {
		t.Fatalf("got %+v", r)
	}
	noKeyLeak(t, "the error", r.Stderr)
	if got := strings.Join(mutations(c), ","); got != "create jobs,create secrets,delete jobs" {
		t.Errorf("mutations = %s, want the Job deleted again", got)
	}
}

// The defaults file may list --secret-env names; the values still come from the shell.
func TestSubmitSecretEnvFromDefaultsFile(t *testing.T) {
	xdg := t.TempDir()
	path := filepath.Join(xdg, "kubectl-tao", "config.yaml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	file := "apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  image: img\n  secret-env: [NGC_KEY, HF_TOKEN=MY_HF]\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"XDG_CONFIG_HOME": xdg, "NGC_KEY": ngcKey, "MY_HF": hfToken}
	r := runEnv(t, cmdtest.Cmd{ClientErr: errors.New("no cluster")}, env, "train", "--dry-run=client", "-o", "yaml", "--", "true")
	if r.Code != 0 || !strings.Contains(r.Stdout, "name: train-env") || !strings.Contains(r.Stdout, "HF_TOKEN: REDACTED") {
		t.Fatalf("got %+v", r)
	}
	noKeyLeak(t, "the dry run", r.Stdout+r.Stderr)

	// Unset in the shell: the error says the defaults file asked for it.
	delete(env, "NGC_KEY")
	r = runEnv(t, cmdtest.Cmd{ClientErr: errors.New("no cluster")}, env, "train", "--dry-run=client", "--", "true")
	if r.Code != int(exitcode.Usage) || !strings.Contains(r.Stderr, "$NGC_KEY is unset") || !strings.Contains(r.Stderr, "set --image, --secret-env") {
		t.Fatalf("got %+v", r)
	}
}
