package cancel_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmdutil"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/internal/cmdtest"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func job(name, uid string, conds ...batchv1.JobConditionType) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: ktypes.UID("uid-" + uidOr(uid, name)),
		Labels: map[string]string{"app.kubernetes.io/managed-by": "kubectl-tao"}}}
	for _, c := range conds {
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: c, Status: corev1.ConditionTrue})
	}
	return j
}

func uidOr(uid, name string) string {
	if uid != "" {
		return uid
	}
	return name
}

func pod(name string, owner *batchv1.Job) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: ktypes.UID("pod-" + name),
		Labels: map[string]string{"batch.kubernetes.io/controller-uid": string(owner.UID), "batch.kubernetes.io/job-name": owner.Name}},
		Spec: corev1.PodSpec{NodeName: "node-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

func run(t *testing.T, c *fake.Clientset, args ...string) (int, string, string) {
	t.Helper()
	r := cmdtest.Cmd{Factory: &cmdutil.FakeFactory{Client: c}, Now: now}.Run(context.Background(), args...)
	return r.Code, r.Stdout, r.Stderr
}

// garbageCollect plays the garbage collector after a foreground delete: once both watches are
// open, the pods go, then the Job.
func garbageCollect(t *testing.T, c *fake.Clientset, j *batchv1.Job, pods ...string) {
	var once sync.Once
	c.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		once.Do(func() {
			go func() {
				time.Sleep(50 * time.Millisecond)
				for _, p := range pods {
					_ = c.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "default", p)
				}
				_ = c.Tracker().Delete(schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}, "default", j.Name)
			}()
		})
		return false, nil, nil
	})
}

func TestCancelWaitsForThePods(t *testing.T) {
	j := job("ddp", "")
	c := fake.NewClientset(j, pod("ddp-0", j), pod("ddp-1", j))
	var deleteOpts metav1.DeleteOptions
	c.PrependReactor("delete", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		deleteOpts = a.(k8stesting.DeleteActionImpl).DeleteOptions
		return true, nil, nil // the Job stays, being deleted, until the "GC" removes it
	})
	garbageCollect(t, c, j, "ddp-0", "ddp-1")
	code, out, errOut := run(t, c, "cancel", "job/ddp", "--timeout", "10s")
	if code != 0 || out != "job.batch/ddp canceled\n" || !strings.Contains(errOut, "Waiting for the pods") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if deleteOpts.Preconditions == nil || *deleteOpts.Preconditions.UID != j.UID || *deleteOpts.PropagationPolicy != metav1.DeletePropagationForeground {
		t.Fatalf("delete options %+v: want a UID precondition and foreground propagation", deleteOpts)
	}
}

func TestCancelTimeoutNamesThePods(t *testing.T) {
	j := job("ddp", "")
	c := fake.NewClientset(j, pod("ddp-0", j), pod("ddp-1", j))
	c.PrependReactor("delete", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, nil })
	code, out, errOut := run(t, c, "cancel", "ddp", "--timeout", "300ms")
	if code != int(exitcode.Timeout) || out != "" || !strings.Contains(errOut, "2 pods remain: ddp-0 (Running on node-1), ddp-1 (Running on node-1)") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestCancelReplacedJobIsNeverDeleted(t *testing.T) {
	j := job("ddp", "")
	c := fake.NewClientset(j)
	c.PrependReactor("delete", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "batch", Resource: "jobs"}, "ddp", nil)
	})
	code, _, errOut := run(t, c, "cancel", "ddp")
	if code != int(exitcode.NotFound) || !strings.Contains(errOut, "replaced by another Job of the same name") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

func TestCancelMissingJob(t *testing.T) {
	code, out, errOut := run(t, fake.NewClientset(), "cancel", "nope")
	if code != int(exitcode.NotFound) || out != "" || !strings.Contains(errOut, `job.batch/nope not found in namespace "default"`) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestCancelNoWaitAndGracePeriod(t *testing.T) {
	j := job("ddp", "")
	c := fake.NewClientset(j, pod("ddp-0", j))
	code, out, _ := run(t, c, "cancel", "ddp", "--wait=false", "--grace-period", "120")
	if code != 0 || !strings.Contains(out, "job.batch/ddp canceled (deletion requested") {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	var podDelete *metav1.DeleteOptions
	for _, a := range c.Actions() {
		if d, ok := a.(k8stesting.DeleteActionImpl); ok && d.Resource.Resource == "pods" {
			podDelete = &d.DeleteOptions
		}
	}
	if podDelete == nil || podDelete.GracePeriodSeconds == nil || *podDelete.GracePeriodSeconds != 120 {
		t.Fatalf("pods were not deleted with the grace period: %+v", podDelete)
	}
}

func TestCancelFinishedJobIsANoOp(t *testing.T) {
	c := fake.NewClientset(job("done", "", batchv1.JobComplete))
	code, out, errOut := run(t, c, "cancel", "done")
	if code != 0 || out != "" || !strings.Contains(errOut, "already finished (Complete)") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, a := range c.Actions() {
		if a.GetVerb() == "delete" {
			t.Fatalf("finished job was deleted by cancel")
		}
	}
}

func TestDeleteRefusesRunningJobs(t *testing.T) {
	c := fake.NewClientset(job("busy", ""), job("done", "", batchv1.JobFailed))
	code, _, errOut := run(t, c, "delete", "busy")
	if code != int(exitcode.Error) || !strings.Contains(errOut, "is Pending, not finished: cancel it") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	code, out, errOut := run(t, c, "delete", "done")
	if code != 0 || out != "job.batch/done deleted\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestCancelUsage(t *testing.T) {
	for _, args := range [][]string{{"cancel"}, {"cancel", "a", "b"}, {"cancel", "pod/x"}, {"cancel", "x", "--timeout", "-1s"}, {"cancel", "x", "--grace-period", "-5"}, {"prune"}, {"delete"}} {
		if code, _, _ := run(t, fake.NewClientset(), args...); code != int(exitcode.Usage) {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func finished(name string, cond batchv1.JobConditionType, ago time.Duration) *batchv1.Job {
	j := job(name, "", cond)
	t := metav1.NewTime(now.Add(-ago))
	j.Status.Conditions[0].LastTransitionTime = t
	if cond == batchv1.JobComplete {
		j.Status.CompletionTime = &t
	}
	return j
}

func TestPrune(t *testing.T) {
	objs := []runtime.Object{
		finished("old-ok", batchv1.JobComplete, 48*time.Hour),
		finished("old-failed", batchv1.JobFailed, 30*time.Hour),
		finished("recent", batchv1.JobComplete, time.Hour),
		job("running", ""),
	}
	c := fake.NewClientset(objs...)
	code, out, _ := run(t, c, "prune", "--older-than", "24h", "--dry-run")
	if code != 0 || out != "job.batch/old-ok pruned (dry run)\njob.batch/old-failed pruned (dry run)\n" {
		t.Fatalf("dry run: exit %d, stdout %q", code, out)
	}
	for _, a := range c.Actions() {
		if a.GetVerb() == "delete" {
			t.Fatal("client dry run deleted something")
		}
	}
	code, out, _ = run(t, c, "prune", "--older-than", "24h")
	if code != 0 || out != "job.batch/old-ok pruned\njob.batch/old-failed pruned\n" {
		t.Fatalf("prune: exit %d, stdout %q", code, out)
	}
	left, _ := c.BatchV1().Jobs("default").List(context.Background(), metav1.ListOptions{})
	if len(left.Items) != 2 {
		t.Fatalf("%d jobs left, want recent and running", len(left.Items))
	}
}
