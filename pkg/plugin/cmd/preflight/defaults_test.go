package preflight_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/preflightcheck"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
)

// runWithDefaults runs preflight -o json with $TAO_CONFIG naming a file holding config.
func runWithDefaults(t *testing.T, c *fake.Clientset, config string, args ...string) (int, map[string]preflightcheck.Check) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cmdtest.Cmd{NS: "ml", Client: c, Env: map[string]string{"TAO_CONFIG": path}}.
		Run(context.Background(), append([]string{"preflight", "-o", "json"}, args...)...)
	var checks []preflightcheck.Check
	if err := json.Unmarshal([]byte(r.Stdout), &checks); err != nil {
		t.Fatalf("stdout is not a list of checks: %v\n%s\nstderr: %s", err, r.Stdout, r.Stderr)
	}
	byName := map[string]preflightcheck.Check{}
	for _, c := range checks {
		byName[c.Name] = c
	}
	return r.Code, byName
}

const header = "apiVersion: kubectl-tao.dev/v1alpha1\nkind: Config\nsubmit:\n"

func TestDefaultsFileSetsTheSharedFlags(t *testing.T) {
	// Two nodes of 8 GPUs: 9 per node never fits, so the fit check shows which --gpus won.
	config := header + "  gpus: 9\n  image: nvcr.io/nvidia/tao/tao-toolkit:6.0\n"

	code, checks := runWithDefaults(t, newClient(nil, cluster()...), config)
	if code != int(exitcode.PreflightFailed) || checks["fit"].Result != preflightcheck.Fail {
		t.Fatalf("exit %d, fit %+v; want the file's --gpus 9 to fail the fit (exit %d)", code, checks["fit"], exitcode.PreflightFailed)
	}
	d := checks["defaults file"]
	if d.Result != preflightcheck.Pass || !strings.Contains(d.Message, "--gpus") || strings.Contains(d.Message, "image") {
		t.Errorf("defaults file check %+v; want PASS naming --gpus only (image is not preflight's)", d)
	}

	code, checks = runWithDefaults(t, newClient(nil, cluster()...), config, "--gpus", "8")
	if code != 0 || checks["fit"].Result != preflightcheck.Pass {
		t.Errorf("with --gpus 8 given: exit %d, fit %+v; the flag must win over the file", code, checks["fit"])
	}
}

func TestDefaultsFileSubmitWouldRefuseFails(t *testing.T) {
	for name, config := range map[string]string{
		"unknown key":   header + "  gpu: 8\n",
		"not a number":  header + "  nodes: two\n",
		"wrong version": "apiVersion: kubectl-tao.dev/v9\nkind: Config\n",
	} {
		t.Run(name, func(t *testing.T) {
			code, checks := runWithDefaults(t, newClient(nil, cluster()...), config)
			d := checks["defaults file"]
			if code != int(exitcode.PreflightFailed) || d.Result != preflightcheck.Fail || !strings.Contains(d.Message, "config.yaml") || !strings.Contains(d.Fix, "point $TAO_CONFIG at another") {
				t.Errorf("exit %d, check %+v; want FAIL naming the file, with a fix naming $TAO_CONFIG (exit %d)", code, d, exitcode.PreflightFailed)
			}
			if checks["cluster"].Result != preflightcheck.Pass {
				t.Errorf("the other checks must still run: cluster %+v", checks["cluster"])
			}
		})
	}
}

// The nodes hold 1Ti of memory each: a rank asking 2Ti fits nowhere, whatever its GPUs. submit's
// capacity guard refuses such a job, so preflight must FAIL it too, whether --memory is typed or
// comes from the defaults file.
func TestMemoryNoNodeHoldsFailsTheFit(t *testing.T) {
	check := func(t *testing.T, code int, fit preflightcheck.Check) {
		t.Helper()
		if code != int(exitcode.PreflightFailed) || fit.Result != preflightcheck.Fail || !strings.Contains(fit.Message, "memory") {
			t.Errorf("exit %d, fit %+v; want FAIL naming memory (exit %d)", code, fit, exitcode.PreflightFailed)
		}
	}
	t.Run("flag", func(t *testing.T) {
		r := run(newClient(nil, cluster()...), "--gpus", "1", "--memory", "2Ti", "-o", "json")
		var checks []preflightcheck.Check
		if err := json.Unmarshal([]byte(r.Stdout), &checks); err != nil {
			t.Fatalf("stdout is not a list of checks: %v\n%s", err, r.Stdout)
		}
		for _, c := range checks {
			if c.Name == "fit" {
				check(t, r.Code, c)
				return
			}
		}
		t.Fatalf("no fit check in %s", r.Stdout)
	})
	t.Run("defaults file", func(t *testing.T) {
		code, checks := runWithDefaults(t, newClient(nil, cluster()...), header+"  memory: 2Ti\n")
		check(t, code, checks["fit"])
		if d := checks["defaults file"]; d.Result != preflightcheck.Pass || !strings.Contains(d.Message, "--memory") {
			t.Errorf("defaults file check %+v; want PASS naming --memory", d)
		}
	})
	t.Run("flag wins over the file", func(t *testing.T) {
		code, checks := runWithDefaults(t, newClient(nil, cluster()...), header+"  memory: 2Ti\n", "--memory", "64Gi")
		if code != 0 || checks["fit"].Result != preflightcheck.Pass {
			t.Errorf("exit %d, fit %+v; want --memory 64Gi to win and fit", code, checks["fit"])
		}
	})
}

func TestBadShapeIsAUsageError(t *testing.T) {
	for _, args := range [][]string{{"--memory", "lots"}, {"--resource", "rdma/ib"}, {"--toleration", "a:Sometimes"}, {"--queue", "Q_1"}} {
		if r := run(newClient(nil, cluster()...), args...); r.Code != int(exitcode.Usage) || !strings.Contains(r.Stderr, args[0]) {
			t.Errorf("%v: exit %d, stderr %q; want a usage error naming %s", args, r.Code, r.Stderr, args[0])
		}
	}
}
