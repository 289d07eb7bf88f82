package submit_test

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
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
)

func TestSubmitWaitWithDryRunIsAUsageError(t *testing.T) {
	c := newClient()
	r := run(t, cmdtest.Cmd{Client: c}, "j", "--image", "img", "--gpus", "0", "--wait", "--dry-run=server", "--", "true")
	if r.Code != int(exitcode.Usage) || !strings.Contains(r.Stderr, "--wait cannot be combined with --dry-run") || len(c.Actions()) != 0 {
		t.Fatalf("got %+v, actions %v", r, c.Actions())
	}
}

func TestSubmitWaitReportsTheOutcome(t *testing.T) {
	for _, tc := range []struct {
		cond   batchv1.JobConditionType
		code   exitcode.Code
		stdout string
	}{
		{batchv1.JobComplete, exitcode.OK, "job.batch/j created\njob.batch/j Complete\n"},
		{batchv1.JobFailed, exitcode.JobFailed, "job.batch/j created\njob.batch/j Error\n"},
	} {
		t.Run(string(tc.cond), func(t *testing.T) {
			c := newClient()
			var once sync.Once
			// Once the wait watches, the Job ends.
			c.PrependWatchReactor("jobs", func(a k8stesting.Action) (bool, watch.Interface, error) {
				w, err := c.Tracker().Watch(a.GetResource(), a.GetNamespace(), a.(k8stesting.WatchActionImpl).ListOptions)
				once.Do(func() {
					go func() {
						time.Sleep(50 * time.Millisecond)
						j, _ := c.BatchV1().Jobs("default").Get(context.Background(), "j", metav1.GetOptions{})
						j.Status.Conditions = []batchv1.JobCondition{{Type: tc.cond, Status: corev1.ConditionTrue, Reason: "R"}}
						_, _ = c.BatchV1().Jobs("default").UpdateStatus(context.Background(), j, metav1.UpdateOptions{})
					}()
				})
				return true, w, err
			})
			r := run(t, cmdtest.Cmd{Client: c}, "j", "--image", "img", "--gpus", "0", "--wait", "--", "true")
			if r.Code != int(tc.code) || r.Stdout != tc.stdout || !strings.HasPrefix(r.Stderr, "Pending (0/1 ranks)\nPending -> ") {
				t.Fatalf("got %+v", r)
			}
		})
	}
}

func TestSubmitWaitKeepsJSONClean(t *testing.T) {
	c := newClient()
	c.PrependReactor("patch", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		// The resumed Job is already finished by the time the wait reads it.
		j, _ := c.Tracker().Get(a.GetResource(), "default", "j")
		job := j.(*batchv1.Job).DeepCopy()
		job.Spec.Suspend = new(bool)
		job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
		if err := c.Tracker().Update(a.GetResource(), job, "default"); err != nil {
			return true, nil, err
		}
		return true, job, nil
	})
	r := run(t, cmdtest.Cmd{Client: c}, "j", "--image", "img", "--gpus", "0", "--wait", "-o", "name", "--", "true")
	if r.Code != 0 || r.Stdout != "job.batch/j\n" || r.Stderr != "Complete (0/1 ranks succeeded)\n" {
		t.Fatalf("got %+v", r)
	}
}
