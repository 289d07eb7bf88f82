package submit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
)

// submitTrain submits job train in namespace ns with args, and the command "echo hi".
func submitTrain(ctx context.Context, c *fake.Clientset, args ...string) cmdtest.Result {
	return cmdtest.Cmd{NS: "ns", Client: c, RandomName: "x7k2p"}.Run(ctx,
		append([]string{"submit", "train", "--image", "busybox", "--gpus", "0"}, append(args, "--", "echo hi")...)...)
}

// whenCreated runs change once the submitted Job exists.
func whenCreated(t *testing.T, c *fake.Clientset, change func(*batchv1.Job)) {
	go func() {
		for i := 0; i < 500; i++ {
			if j, err := c.BatchV1().Jobs("ns").Get(context.Background(), "train", metav1.GetOptions{}); err == nil && j.Spec.Suspend != nil && !*j.Spec.Suspend {
				change(j)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

func TestSubmitFollow(t *testing.T) {
	c := fake.NewClientset()
	whenCreated(t, c, func(j *batchv1.Job) {
		j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
		_, _ = c.BatchV1().Jobs("ns").UpdateStatus(context.Background(), j, metav1.UpdateOptions{})
	})
	r := submitTrain(context.Background(), c, "--follow")
	if r.Code != 0 || r.Stdout != "" || r.Stderr != "job.batch/train created\n" {
		t.Fatalf("got %+v", r)
	}
}

func TestSubmitFollowDetaches(t *testing.T) {
	c := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	whenCreated(t, c, func(*batchv1.Job) { time.Sleep(100 * time.Millisecond); cancel() })
	r := submitTrain(ctx, c, "--follow")
	want := "job.batch/train created\nerror: detached from job.batch/train: it keeps running; cancel it with: kubectl tao cancel train -n ns\n"
	if r.Code != int(exitcode.Error) || r.Stdout != "" || r.Stderr != want {
		t.Fatalf("got %+v", r)
	}
	if _, err := c.BatchV1().Jobs("ns").Get(context.Background(), "train", metav1.GetOptions{}); err != nil {
		t.Fatalf("the job must keep running: %v", err)
	}
}

func TestSubmitFollowUsage(t *testing.T) {
	for _, args := range [][]string{{"--follow", "--dry-run=client"}, {"--follow", "--wait"}} {
		c := fake.NewClientset()
		r := submitTrain(context.Background(), c, args...)
		if r.Code != int(exitcode.Usage) || !strings.Contains(r.Stderr, "--follow cannot be combined with --wait (it already waits) or --dry-run") {
			t.Errorf("%v: got %+v", args, r)
		}
		if len(c.Actions()) != 0 {
			t.Errorf("%v: sent %v", args, c.Actions())
		}
	}
}
