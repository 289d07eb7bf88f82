package configcmd_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmdutil"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/internal/cmdtest"
)

func view(t *testing.T, file string) (int, string, string) {
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
	r := cmdtest.Cmd{Factory: &cmdutil.FakeFactory{}, Env: env}.Run(context.Background(), "config", "view")
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
