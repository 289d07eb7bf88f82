package wait_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

// train is the Job the tests wait for: two ranks, not started.
func train() *fixture.JobWrapper {
	return fixture.Job("train").Namespace("ml").UID("uid-1").Nodes(2)
}

// watched returns a clientset whose job watches go through the tracker, and a channel closed
// once the first watch is established (so changes made after it are seen as events).
func watched(objs ...*batchv1.Job) (*fake.Clientset, <-chan struct{}) {
	var in []runtime.Object
	for _, o := range objs {
		in = append(in, o)
	}
	c := fake.NewClientset(in...)
	started := make(chan struct{})
	var once sync.Once
	c.PrependWatchReactor("jobs", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := c.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		once.Do(func() { close(started) })
		return true, w, err
	})
	return c, started
}

func run(ctx context.Context, c *fake.Clientset, args ...string) cmdtest.Result {
	return runTo(ctx, c, nil, args...)
}

// runTo runs `wait args`, writing stderr to errOut (when set) that a test may read meanwhile.
func runTo(ctx context.Context, c *fake.Clientset, errOut *testbuf.Buffer, args ...string) cmdtest.Result {
	return cmdtest.Cmd{NS: "ml", Client: c, Now: time.Now(), Stderr: errOut}.Run(ctx, append([]string{"wait"}, args...)...)
}

// waitWhile runs `wait args` and, once its watch is up, applies the changes in order, each
// once the previous one was reported (else the watch may see only the last state).
func waitWhile(t *testing.T, c *fake.Clientset, started <-chan struct{}, args []string, changes ...func()) cmdtest.Result {
	t.Helper()
	done := make(chan cmdtest.Result)
	errOut := &testbuf.Buffer{}
	go func() { done <- runTo(context.Background(), c, errOut, args...) }()
	select {
	case <-started:
	case r := <-done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the wait never started watching")
	}
	for _, change := range changes {
		lines := strings.Count(errOut.String(), "\n")
		change()
		for deadline := time.Now().Add(5 * time.Second); strings.Count(errOut.String(), "\n") == lines && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}
	select {
	case r := <-done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end")
	}
	return cmdtest.Result{}
}

func updateTo(t *testing.T, c *fake.Clientset, j *batchv1.Job) func() {
	return func() {
		t.Helper()
		if _, err := c.BatchV1().Jobs("ml").UpdateStatus(context.Background(), j, metav1.UpdateOptions{}); err != nil {
			t.Error(err)
		}
	}
}

func verbs(c *fake.Clientset) []string {
	var out []string
	for _, a := range c.Actions() {
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
	}
	return out
}

func TestWaitOutcomes(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		changes    func(t *testing.T, c *fake.Clientset) []func()
		code       exitcode.Code
		stdout     string
		stderr     []string
		noStderrOf string
	}{
		{
			name: "runs then completes",
			changes: func(t *testing.T, c *fake.Clientset) []func() {
				return []func(){updateTo(t, c, train().Active(2).Ready(1).Obj()), updateTo(t, c, train().Active(2).Ready(2).Obj()), updateTo(t, c, train().Active(0).Ready(0).Succeeded(2).Condition(batchv1.JobComplete, "CompletionsReached", "").Obj())}
			},
			code:   exitcode.OK,
			stdout: "job.batch/train Complete\n",
			stderr: []string{"Pending (0/2 ranks)\nPending -> Running (1/2 ranks)\nRunning (1/2 -> 2/2 ranks)\nRunning -> Complete (2/2 ranks succeeded)\n"},
		},
		{
			name: "success criteria met counts as the end (1.31+)",
			changes: func(t *testing.T, c *fake.Clientset) []func() {
				return []func(){updateTo(t, c, train().Active(2).Ready(2).Condition(batchv1.JobSuccessCriteriaMet, "", "").Obj())}
			},
			code:   exitcode.OK,
			stdout: "job.batch/train Complete\n",
		},
		{
			name: "oom fails",
			changes: func(t *testing.T, c *fake.Clientset) []func() {
				return []func(){updateTo(t, c, train().Active(2).Ready(2).Obj()), updateTo(t, c, train().Active(0).Ready(0).Condition(batchv1.JobFailureTarget, "PodFailurePolicy", "Container tao exited with 137").Obj())}
			},
			code:   exitcode.JobFailed,
			stdout: "job.batch/train Error\n",
			stderr: []string{"Running -> Error (PodFailurePolicy: Container tao exited with 137)\n", "error: job.batch/train failed: PodFailurePolicy"},
		},
		{
			name: "deleted while running",
			changes: func(t *testing.T, c *fake.Clientset) []func() {
				return []func(){updateTo(t, c, train().Active(2).Ready(2).Obj()), func() {
					if err := c.BatchV1().Jobs("ml").Delete(context.Background(), "train", metav1.DeleteOptions{}); err != nil {
						t.Error(err)
					}
				}}
			},
			code:   exitcode.JobCanceled,
			stdout: "job.batch/train Canceled\n",
			stderr: []string{"Running -> Canceled (the Job was deleted)\n", "error: job.batch/train was canceled"},
		},
		{
			name: "being deleted (foreground) is canceled",
			changes: func(t *testing.T, c *fake.Clientset) []func() {
				return []func(){updateTo(t, c, train().Active(2).Ready(2).Deleting(time.Now()).Obj())}
			},
			code:   exitcode.JobCanceled,
			stdout: "job.batch/train Canceled\n",
		},
		{
			name: "replaced by a same-name Job is canceled",
			changes: func(t *testing.T, c *fake.Clientset) []func() {
				return []func(){updateTo(t, c, train().UID("uid-2").Obj())}
			},
			code:   exitcode.JobCanceled,
			stdout: "job.batch/train Canceled\n",
		},
		{
			name: "timeout",
			args: []string{"--timeout", "2s"},
			changes: func(t *testing.T, c *fake.Clientset) []func() {
				return []func(){updateTo(t, c, train().Active(2).Ready(2).Obj())}
			},
			code:   exitcode.Timeout,
			stdout: "",
			stderr: []string{"error: timed out after 2s waiting for job.batch/train (last status: Running (2/2 ranks))"},
		},
		{
			name: "a rank that cannot start, for --stuck-timeout",
			args: []string{"--stuck-timeout", "300ms", "-o", "json"},
			changes: func(t *testing.T, c *fake.Clientset) []func() {
				job := train().DefaultSelector().Container(corev1.Container{Name: "tao", Image: "local/nonexistent:1"}).Obj()
				pod := fixture.RankPod(job, 1).Node("node-1").Waiting("ErrImageNeverPull", `Container image "local/nonexistent:1" is not present with pull policy of Never`).Obj()
				return []func(){func() {
					if _, err := c.CoreV1().Pods("ml").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
						t.Error(err)
					}
				}}
			},
			code:   exitcode.Stuck,
			stdout: "",
			stderr: []string{
				"rank 1 (pod train-1-abcde) cannot start: ErrImageNeverPull: Container image \"local/nonexistent:1\" is not present with pull policy of Never",
				"; see why: kubectl tao diagnose train -n ml\n",
				"error: job.batch/train could not start for 300ms (--stuck-timeout): ErrImageNeverPull",
			},
		},
		{
			name: "-o json prints the status object",
			args: []string{"-o", "jsonpath={.status} {.succeeded}"},
			changes: func(t *testing.T, c *fake.Clientset) []func() {
				return []func(){updateTo(t, c, train().Active(0).Ready(0).Succeeded(2).Condition(batchv1.JobComplete, "", "").Obj())}
			},
			code:   exitcode.OK,
			stdout: "Complete 2",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, started := watched(train().Obj())
			r := waitWhile(t, c, started, append([]string{"job.batch/train"}, tc.args...), tc.changes(t, c)...)
			if r.Code != int(tc.code) || r.Stdout != tc.stdout {
				t.Fatalf("got exit %d stdout %q stderr %q; want exit %d stdout %q", r.Code, r.Stdout, r.Stderr, tc.code, tc.stdout)
			}
			for _, s := range tc.stderr {
				if !strings.Contains(r.Stderr, s) {
					t.Errorf("stderr %q lacks %q", r.Stderr, s)
				}
			}
			// A watch, not polling: one get, then jobwatch's list and watch.
			for i, v := range verbs(c) {
				if v == "get jobs" && i > 0 {
					t.Errorf("requests %v: the Job was polled", verbs(c))
				}
			}
		})
	}
}

func TestWaitAlreadyFinishedNeedsOneGet(t *testing.T) {
	c, _ := watched(train().Active(0).Ready(0).Succeeded(2).Condition(batchv1.JobComplete, "", "").Obj())
	r := run(context.Background(), c, "train")
	if r.Code != 0 || r.Stdout != "job.batch/train Complete\n" || r.Stderr != "Complete (2/2 ranks succeeded)\n" {
		t.Fatalf("got %+v", r)
	}
	if got := strings.Join(verbs(c), ","); got != "get jobs" {
		t.Errorf("requests = %s", got)
	}
}

func TestWaitMissingJob(t *testing.T) {
	c, _ := watched()
	r := run(context.Background(), c, "train")
	if r.Code != int(exitcode.NotFound) || r.Stdout != "" || r.Stderr != "error: job.batch \"train\" not found in namespace \"ml\"\n" {
		t.Fatalf("got %+v", r)
	}
}

func TestWaitInterrupted(t *testing.T) {
	c, started := watched(train().Obj())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan cmdtest.Result)
	go func() { done <- run(ctx, c, "train") }()
	<-started
	cancel()
	r := <-done
	if r.Code != int(exitcode.Error) || !strings.Contains(r.Stderr, "interrupted while waiting for job.batch/train") {
		t.Fatalf("got %+v", r)
	}
}

func TestWaitFlags(t *testing.T) {
	c, _ := watched(train().Obj())
	for _, args := range [][]string{{}, {"train", "--timeout", "-1s"}, {"train", "--stuck-timeout", "-1s"}, {"train", "-o", "wide"}, {"svc/train"}} {
		if r := run(context.Background(), c, args...); r.Code != int(exitcode.Usage) {
			t.Errorf("%v: got %+v, want a usage error", args, r)
		}
	}
	if len(c.Actions()) != 0 {
		t.Errorf("usage errors reached the API: %v", verbs(c))
	}
}
