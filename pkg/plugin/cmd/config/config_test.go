package config_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
)

func view(t *testing.T, file string, args ...string) (int, string, string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "tao.yaml")
	if file != "" {
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"HOME": dir}
	if file != "" {
		env["TAO_CONFIG"] = path
	}
	r := cmdtest.Cmd{Env: env}.Run(context.Background(), append([]string{"config", "view"}, args...)...)
	return r.Code, r.Stdout, r.Stderr
}

func TestConfigView(t *testing.T) {
	code, out, errOut := view(t, "apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  image: img\n  toleration: [a=b:NoSchedule]\n")
	if code != 0 || out != "apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  image: img\n  toleration:\n    - a=b:NoSchedule\n" ||
		!strings.Contains(errOut, "tao.yaml") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	code, out, errOut = view(t, "apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  follow: true\n")
	if code != 2 || out != "" || !strings.Contains(errOut, `tao.yaml:4: submit: "follow" is not a flag a defaults file can set`) {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	code, out, errOut = view(t, "")
	if code != 0 || out != "" || !strings.Contains(errOut, "no defaults file at ") || !strings.Contains(errOut, ".config/kubectl-tao/config.yaml") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// -o prints what the file means: numbers and booleans as YAML reads them, not as strings.
func TestConfigViewJSON(t *testing.T) {
	file := "apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  image: img\n  gpus: 8\n"
	code, out, errOut := view(t, file, "-o", "json")
	want := "{\n    \"apiVersion\": \"kubectl-tao.dev/v1alpha1\",\n    \"kind\": \"Config\",\n    \"submit\": {\n        \"gpus\": 8,\n        \"image\": \"img\"\n    }\n}\n"
	if code != 0 || out != want {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr:\n%s", code, out, want, errOut)
	}
	code, out, _ = view(t, file, "-o", "jsonpath={.submit.gpus}")
	if code != 0 || out != "8" {
		t.Fatalf("jsonpath: exit %d, %q", code, out)
	}
}
