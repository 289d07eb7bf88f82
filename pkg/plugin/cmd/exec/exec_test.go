package exec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	uexec "k8s.io/client-go/util/exec"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fakefactory"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

var t0 = time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)

// ddp is the Job whose pods the tests exec in: Indexed, two ranks of one container "tao".
func ddp() *fixture.JobWrapper {
	return fixture.Job("ddp").Namespace("ml").UID("uid-ddp").Indexed().Completions(2).Container(corev1.Container{Name: "tao"})
}

func ddpObjects() []runtime.Object {
	p0 := fixture.RankPod(ddp().Obj(), 0).Name("ddp-0-a").Created(t0.Add(-time.Hour)).Phase(corev1.PodRunning).Obj()
	// The stager's init container, as a staged job's pods have it: kubectl would say which
	// container it defaulted to.
	p0.Spec.InitContainers = []corev1.Container{{Name: "tao-stager"}}
	p1 := fixture.RankPod(ddp().Obj(), 1).Name("ddp-1-a").Created(t0.Add(-time.Hour)).Phase(corev1.PodPending).Obj()
	// A pod of an earlier Job of the same name: never picked (selected by controller UID).
	stale := fixture.RankPod(ddp().UID("uid-old").Obj(), 1).Name("ddp-1-stale").Created(t0.Add(-2 * time.Hour)).Phase(corev1.PodRunning).Obj()
	return []runtime.Object{ddp().Obj(), p0, p1, stale}
}

// fakeExecutor records the exec request and plays the remote command.
type fakeExecutor struct {
	url    *url.URL
	stdin  string
	output string
	err    error
	ctx    context.Context
}

func (f *fakeExecutor) Execute(u *url.URL, _ *rest.Config, in io.Reader, out, _ io.Writer, _ bool, _ remotecommand.TerminalSizeQueue) error {
	return f.ExecuteWithContext(context.Background(), u, nil, in, out, nil, false, nil)
}

func (f *fakeExecutor) ExecuteWithContext(ctx context.Context, u *url.URL, _ *rest.Config, in io.Reader, out, _ io.Writer, _ bool, _ remotecommand.TerminalSizeQueue) error {
	f.url, f.ctx = u, ctx
	if in != nil {
		b, _ := io.ReadAll(in)
		f.stdin = string(b)
	}
	fmt.Fprint(out, f.output)
	return f.err
}

type streams struct{ out, errOut bytes.Buffer }

func runExec(t *testing.T, client *fake.Clientset, ex *fakeExecutor, args ...string) (*streams, error) {
	t.Helper()
	s := &streams{}
	f := &fakefactory.Factory{NS: "ml", Client: client}
	o := &ExecOptions{factory: f, executor: ex, IOStreams: genericiooptions.IOStreams{In: strings.NewReader("input"), Out: &s.out, ErrOut: &s.errOut}}
	cmd := o.cobraCommand(f)
	cmd.SetArgs(args)
	cmd.SetOut(&s.out)
	cmd.SetErr(&s.errOut)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	return s, cmd.ExecuteContext(context.WithValue(context.Background(), ctxKey{}, "exec"))
}

type ctxKey struct{}

func TestExecRunsInTheRanksPod(t *testing.T) {
	client := fake.NewClientset(ddpObjects()...)
	ex := &fakeExecutor{output: "hello\n"}
	s, err := runExec(t, client, ex, "job/ddp", "-i", "--", "python", "-c", "print(1)")
	if err != nil {
		t.Fatalf("exec: %v (stderr %q)", err, s.errOut.String())
	}
	if s.out.String() != "hello\n" || ex.stdin != "input" || s.errOut.String() != "" {
		t.Fatalf("stdout %q, stderr %q, stdin seen %q", s.out.String(), s.errOut.String(), ex.stdin)
	}
	q := ex.url.Query()
	if ex.url.Path != "/api/v1/namespaces/ml/pods/ddp-0-a/exec" || strings.Join(q["command"], " ") != "python -c print(1)" ||
		q.Get("container") != "tao" || q.Get("stdin") != "true" || q.Get("tty") != "" {
		t.Fatalf("exec URL %s", ex.url)
	}
	if ex.ctx == nil || ex.ctx.Value(ctxKey{}) != "exec" {
		t.Fatalf("the executor did not get the command's context")
	}
	// The job and its pods (sent together, so in either order), then kubectl's own get of the pod.
	var calls []string
	for _, a := range client.Actions() {
		calls = append(calls, a.GetVerb()+" "+a.GetResource().Resource)
	}
	if len(calls) == 3 {
		sort.Strings(calls[:2])
	}
	if got := strings.Join(calls, ", "); got != "get jobs, list pods, get pods" {
		t.Fatalf("API calls %s", got)
	}
}

func TestExecExitCodes(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		execErr  error
		wantCode exitcode.Code
		wantMsg  string
	}{
		{"the remote command's status", []string{"ddp", "--", "false"}, uexec.CodeExitError{Err: errors.New("command terminated with non-zero exit code"), Code: 42},
			42, "command terminated with exit code 42 (pod ddp-0-a, rank 0)"},
		{"a stream failure names the pod", []string{"ddp", "--", "true"}, errors.New("error dialing backend: connection refused"),
			exitcode.Error, "exec in pod ddp-0-a (rank 0 of job.batch/ddp): error dialing backend"},
		{"no such job", []string{"nope", "--", "true"}, nil, exitcode.NotFound, `"nope" not found`},
		{"rank not running", []string{"ddp", "--rank", "1", "--", "true"}, nil, exitcode.Error, "rank 1 of job.batch/ddp is not running (pod ddp-1-a Pending); ranks: 0 Running, 1 Pending"},
		{"rank outside the job", []string{"ddp", "--rank", "2", "--", "true"}, nil, exitcode.NotFound, "job.batch/ddp has no rank 2: its ranks are 0..1"},
		{"no command", []string{"ddp"}, nil, exitcode.Usage, `put the command after "--"`},
		{"empty command", []string{"ddp", "--"}, nil, exitcode.Usage, `no command after "--"`},
		{"two jobs", []string{"a", "b", "--", "true"}, nil, exitcode.Usage, `expected one JOB before "--", got 2`},
		{"not a job", []string{"pod/x", "--", "true"}, nil, exitcode.Usage, "is not a Job"},
		{"negative rank", []string{"ddp", "--rank", "-1", "--", "true"}, nil, exitcode.Usage, "--rank must be 0 or more"},
		{"unknown container", []string{"ddp", "-c", "side", "--", "true"}, nil, exitcode.Error, "container side is not valid for pod ddp-0-a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runExec(t, fake.NewClientset(ddpObjects()...), &fakeExecutor{err: tc.execErr}, tc.args...)
			if exitcode.Of(err) != tc.wantCode || err == nil || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("err %v (exit %d), want exit %d and %q", err, exitcode.Of(err), tc.wantCode, tc.wantMsg)
			}
		})
	}
}
