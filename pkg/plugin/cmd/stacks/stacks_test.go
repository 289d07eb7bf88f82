package stacks

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fakefactory"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// execByPod answers stage stacks per pod.
type execByPod map[string]string

func (e execByPod) Exec(_ context.Context, _, pod, _ string, _ []string) ([]byte, error) {
	if out, ok := e[pod]; ok {
		return []byte(out), nil
	}
	return nil, errors.New("command terminated with non-zero exit code: no Python process of the command could dump its stacks")
}

// cluster is a 2-rank job, supervised or not, rank 0 running and rank 1 finished.
func cluster(supervised bool) *fake.Clientset {
	c := corev1.Container{Name: jobspec.ContainerName}
	if supervised {
		c.Env = []corev1.EnvVar{{Name: jobspec.EnvStager, Value: s3layout.StagerBinary}}
	}
	j := fixture.Job("ddp").Namespace("ml").UID("u").DefaultSelector().Indexed().Completions(2).Container(c).Obj()
	return fake.NewClientset(j,
		fixture.RankPod(j, 0).Name("ddp-0-a").Running(t0).Obj(),
		fixture.RankPod(j, 1).Name("ddp-1-a").Succeeded(t0).Obj())
}

func run(client *fake.Clientset, args ...string) (string, string, error) {
	var out, errOut bytes.Buffer
	f := &fakefactory.Factory{NS: "ml", Client: client}
	o := &Options{factory: f, executor: execByPod{"ddp-0-a": "--- process 7 (python train.py), by faulthandler ---\n  File \"train.py\", line 3 in <module>\n"},
		IOStreams: genericiooptions.IOStreams{Out: &out, ErrOut: &errOut}, Rank: -1}
	cmd := o.cobraCommand(f)
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// stdout holds only the stacks, prefixed by rank; a rank that gave none is said on stderr.
func TestStacks(t *testing.T) {
	out, errOut, err := run(cluster(true), "ddp")
	want := "[rank 0] --- process 7 (python train.py), by faulthandler ---\n[rank 0]   File \"train.py\", line 3 in <module>\n"
	if err != nil || out != want || !strings.Contains(errOut, "rank 1: rank 1 of job.batch/ddp is not running") {
		t.Errorf("err %v\nstdout %q, want %q\nstderr %q", err, out, want, errOut)
	}
}

// Bad input: a clear error, its exit code, nothing on stdout.
func TestStacksErrors(t *testing.T) {
	for _, tc := range []struct {
		name       string
		supervised bool
		args       []string
		code       exitcode.Code
		msg        string
	}{
		{"no job", true, nil, exitcode.Usage, "expected one JOB"},
		{"two jobs", true, []string{"a", "b"}, exitcode.Usage, "expected one JOB"},
		{"negative rank", true, []string{"ddp", "--rank", "-1"}, exitcode.Usage, "--rank must be 0 or more"},
		{"no such rank", true, []string{"ddp", "--rank", "5"}, exitcode.NotFound, "has no rank 5"},
		{"a finished rank", true, []string{"ddp", "--rank", "1"}, exitcode.Error, "rank 1 of job.batch/ddp is not running"},
		{"no such job", true, []string{"nope"}, exitcode.NotFound, "not found"},
		{"no supervisor", false, []string{"ddp"}, exitcode.Usage, "does not run under kubectl-tao's supervisor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := run(cluster(tc.supervised), tc.args...)
			if exitcode.Of(err) != tc.code || err == nil || !strings.Contains(err.Error(), tc.msg) || out != "" {
				t.Errorf("err %v (exit %d), stdout %q; want exit %d and %q", err, exitcode.Of(err), out, tc.code, tc.msg)
			}
		})
	}
}
