package submit_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
)

// runWithDefaults runs submit with a defaults file at $XDG_CONFIG_HOME/kubectl-tao/config.yaml.
func runWithDefaults(t *testing.T, file string, args ...string) cmdtest.Result {
	t.Helper()
	xdg := t.TempDir()
	if file != "" {
		path := filepath.Join(xdg, "kubectl-tao", "config.yaml")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return runEnv(t, cmdtest.Cmd{NS: "ml", Client: newClient()}, map[string]string{"XDG_CONFIG_HOME": xdg}, args...)
}

const defaultsFile = `apiVersion: kubectl-tao.dev/v1alpha1
kind: Config
submit:
  image: nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt
  image-pull-secret: ngc
  shm-size: 32Gi
  toleration: [dedicated=ml:NoSchedule]
  env: [NCCL_DEBUG=INFO]
  node-selector: [pool=h100]
  priority-class: training
`

func TestDefaultsFile(t *testing.T) {
	r := runWithDefaults(t, defaultsFile, "train", "--dry-run=client", "-o", "yaml", "--", "python", "train.py")
	if r.Code != 0 {
		t.Fatalf("%+v", r)
	}
	for _, want := range []string{
		"image: nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt", "- name: ngc", "sizeLimit: 32Gi", "key: dedicated",
		"value: ml", "name: NCCL_DEBUG", "pool: h100", "priorityClassName: training",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("dry run lacks %q:\n%s", want, r.Stdout)
		}
	}

	// Flags win; a repeatable flag on the command line replaces the file's list.
	r = runWithDefaults(t, defaultsFile, "train", "--dry-run=client", "-o", "yaml", "--image", "pytorch/pytorch:latest",
		"--toleration", "team=a:NoExecute", "--shm-size", "0", "--", "python", "train.py")
	if r.Code != 0 {
		t.Fatalf("%+v", r)
	}
	for _, want := range []string{"image: pytorch/pytorch:latest", "key: team", "- name: ngc", "name: NCCL_DEBUG"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("dry run lacks %q:\n%s", want, r.Stdout)
		}
	}
	for _, unwanted := range []string{"tao-toolkit", "dedicated", "sizeLimit: 32Gi", "dshm"} {
		if strings.Contains(r.Stdout, unwanted) {
			t.Errorf("dry run still has %q from the file:\n%s", unwanted, r.Stdout)
		}
	}
}

func TestDefaultsFileErrors(t *testing.T) {
	tests := []struct {
		name, file string
		args       []string
		want       []string
	}{
		{"unknown key", "apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  imag: x\n", nil,
			[]string{"kubectl-tao/config.yaml:4: submit: \"imag\" is not a flag a defaults file can set", "image"}},
		{"connection flags are not submit's", "apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  namespace: x\n", nil,
			[]string{`"namespace" is not a flag a defaults file can set`}},
		{"a bad value the command judges names the file", "apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  shm-size: lots\n",
			[]string{"--image", "img"}, []string{"shm-size", "(the defaults file ", "config.yaml set --shm-size)"}},
		{"which run to resume from is not a standing preference", "apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  resume-from: old\n", nil,
			[]string{`"resume-from" is not a flag a defaults file can set`}},
		{"wrong apiVersion", "apiVersion: v9\nkind: Config\n", nil, []string{`config.yaml:1: apiVersion "v9" is not supported`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runWithDefaults(t, tc.file, append(tc.args, "--dry-run=client", "--", "true")...)
			if r.Code != 2 || r.Stdout != "" {
				t.Fatalf("want exit 2 and no output, got %+v", r)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.Stderr, w) {
					t.Errorf("stderr lacks %q: %s", w, r.Stderr)
				}
			}
		})
	}
}

func TestNoDefaultsFileChangesNothing(t *testing.T) {
	r := runWithDefaults(t, "", "--dry-run=client", "--", "true")
	if r.Code != 2 || !strings.Contains(r.Stderr, "--image") {
		t.Fatalf("without a file, --image is still required: %+v", r)
	}
}
