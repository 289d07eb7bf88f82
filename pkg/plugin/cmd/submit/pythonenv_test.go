package submit_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
)

// TestSubmitPythonUnbuffered: submit sets PYTHONUNBUFFERED=1 unless a value comes from the
// command line, the defaults file or --secret-env; an empty one stays empty (Python's "off").
func TestSubmitPythonUnbuffered(t *testing.T) {
	const withEnv = "apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n  env: [PYTHONUNBUFFERED=]\n"
	tests := []struct {
		name, file string
		flags      []string
		// value is the variable's value; secret, that it comes from the job's env Secret.
		value  string
		secret bool
	}{
		{name: "default", value: "1"},
		{name: "--env", flags: []string{"--env", "PYTHONUNBUFFERED=yes"}, value: "yes"},
		{name: "--env empty", flags: []string{"--env", "PYTHONUNBUFFERED="}, value: ""},
		{name: "defaults file", file: withEnv, value: ""},
		{name: "--env over the defaults file", file: withEnv, flags: []string{"--env", "PYTHONUNBUFFERED=1"}, value: "1"},
		{name: "--secret-env", flags: []string{"--secret-env", "PYTHONUNBUFFERED=MY_PY"}, secret: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"MY_PY": "0", "XDG_CONFIG_HOME": t.TempDir()}
			if tc.file != "" {
				path := filepath.Join(env["XDG_CONFIG_HOME"], "kubectl-tao", "config.yaml")
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			c := newClient()
			args := append(append([]string{"train", "--image", "img", "--gpus", "0"}, tc.flags...), "--", "python", "train.py")
			r := runEnv(t, cmdtest.Cmd{NS: "ml", Client: c}, env, args...)
			if r.Code != 0 {
				t.Fatalf("%+v", r)
			}
			job, err := c.BatchV1().Jobs("ml").Get(context.Background(), "train", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var got []corev1.EnvVar
			for _, e := range job.Spec.Template.Spec.Containers[0].Env {
				if e.Name == "PYTHONUNBUFFERED" {
					got = append(got, e)
				}
			}
			if len(got) != 1 || got[0].Value != tc.value || (got[0].ValueFrom != nil) != tc.secret {
				t.Errorf("PYTHONUNBUFFERED in the Job: %+v, want one, value %q (from the Secret: %v)", got, tc.value, tc.secret)
			}

			// The dry run shows what the Job would get.
			dry := runEnv(t, cmdtest.Cmd{NS: "ml", Client: newClient()}, env, append([]string{"--dry-run=client", "-o", "yaml"}, args...)...)
			if n := strings.Count(dry.Stdout, "name: PYTHONUNBUFFERED"); dry.Code != 0 || n != 1 {
				t.Errorf("dry run: want PYTHONUNBUFFERED once, got %d times:\n%+v", n, dry)
			}
			if tc.value == "1" && !regexp.MustCompile(`- name: PYTHONUNBUFFERED\n\s+value: "1"\n`).MatchString(dry.Stdout) {
				t.Errorf("dry run lacks PYTHONUNBUFFERED=1:\n%s", dry.Stdout)
			}
		})
	}
}
