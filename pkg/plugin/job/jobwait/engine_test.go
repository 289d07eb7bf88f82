package jobwait

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

// TestUntilOutageIsTwoLines: the server refuses the wait's lists for longer than outage.Quiet,
// then answers and the Job completes. The user reads one line for the outage and one for its
// end; client-go's reflector logs nothing at the default verbosity.
func TestUntilOutageIsTwoLines(t *testing.T) {
	var klogOut bytes.Buffer
	klog.LogToStderr(false)
	klog.SetOutput(&klogOut)
	defer klog.LogToStderr(true)

	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml", UID: "uid-1"}}
	c := fake.NewClientset(job)
	var (
		mu       sync.Mutex
		refusals int
	)
	progress := &testbuf.Buffer{}
	refused := fmt.Errorf("dial tcp 127.0.0.1:6443: connect: %w", syscall.ECONNREFUSED)
	c.PrependReactor("list", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		// Refused until the outage has been said (after outage.Quiet): a refusal timed against
		// a clock of the test's own would race the reporter's on a loaded machine.
		if !strings.Contains(progress.String(), "the API server is unreachable since") {
			refusals++
			return true, nil, refused
		}
		return false, nil, nil
	})
	done := make(chan error, 1)
	var out Outcome
	go func() {
		var err error
		out, err = Until(context.Background(), c, Target{Namespace: "ml", Name: "train"}, Options{Timeout: 30 * time.Second}, progress)
		done <- err
	}()
	for !strings.Contains(progress.String(), "answers again") {
		select {
		case err := <-done:
			t.Fatalf("Until ended early: %v; progress %q", err, progress.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	completed := job.DeepCopy()
	completed.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue},
	}
	if _, err := c.BatchV1().Jobs("ml").UpdateStatus(context.Background(), completed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil || out.Result.Status != jobstatus.Complete {
			t.Fatalf("Until = %+v, %v", out.Result, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Until did not end")
	}
	if refusals < 2 {
		t.Fatalf("%d refused lists: the outage was not exercised", refusals)
	}
	var outageLines []string
	for _, l := range strings.Split(progress.String(), "\n") {
		if strings.Contains(l, "API server") {
			outageLines = append(outageLines, l)
		}
	}
	if len(outageLines) != 2 || !strings.HasPrefix(outageLines[0], "waiting for job.batch/train: the API server is unreachable since ") ||
		!strings.HasPrefix(outageLines[1], "waiting for job.batch/train: the API server answers again") {
		t.Errorf("progress:\n%s\nwant one outage line and one return line", progress.String())
	}
	klog.Flush()
	if klogOut.Len() != 0 {
		t.Errorf("klog at the default verbosity printed the retries:\n%s", klogOut.String())
	}
}
