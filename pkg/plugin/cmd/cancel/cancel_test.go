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
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func run(t *testing.T, c *fake.Clientset, args ...string) (int, string, string) {
	t.Helper()
	r := cmdtest.Cmd{Client: c, Now: now}.Run(context.Background(), args...)
	return r.Code, r.Stdout, r.Stderr
}

// garbageCollect plays the garbage collector after a foreground delete: once both watches are
// open, the pods go, then the Job. The reactor opens each watch itself, so that it is registered
// before the deletions happen (a sleep lost the events on a loaded machine).
func garbageCollect(t *testing.T, c *fake.Clientset, j *batchv1.Job, pods ...string) {
	t.Helper()
	var mu sync.Mutex
	opened := 0
	for _, res := range []string{"pods", "jobs"} {
		c.PrependWatchReactor(res, func(a k8stesting.Action) (bool, watch.Interface, error) {
			w, err := c.Tracker().Watch(a.GetResource(), a.GetNamespace())
			if err != nil {
				return true, nil, err
			}
			mu.Lock()
			opened++
			both := opened == 2
			mu.Unlock()
			if both {
				// At once, before the wait holds either watch: the fake does not replay from a
				// resourceVersion, so a deletion between the wait's re-list and its next watch
				// would be lost (a real API server replays it).
				for _, p := range pods {
					_ = c.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "default", p)
				}
				_ = c.Tracker().Delete(schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}, "default", j.Name)
			}
			return true, w, nil
		})
	}
}

func TestCancelUsage(t *testing.T) {
	for _, args := range [][]string{{"cancel"}, {"cancel", "a", "b"}, {"cancel", "pod/x"}, {"cancel", "x", "--timeout", "-1s"}, {"cancel", "x", "--grace-period", "-5"}} {
		if code, _, _ := run(t, fake.NewClientset(), args...); code != int(exitcode.Usage) {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestCancelWaitsForThePods(t *testing.T) {
	j := fixture.Job("ddp").Namespace("default").Label("app.kubernetes.io/managed-by", "kubectl-tao").Obj()
	c := fake.NewClientset(j, fixture.RankPod(j, 0).Name("ddp-0").Node("node-1").Phase(corev1.PodRunning).Obj(), fixture.RankPod(j, 1).Name("ddp-1").Node("node-1").Phase(corev1.PodRunning).Obj())
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
	j := fixture.Job("ddp").Namespace("default").Label("app.kubernetes.io/managed-by", "kubectl-tao").Obj()
	c := fake.NewClientset(j, fixture.RankPod(j, 0).Name("ddp-0").Node("node-1").Phase(corev1.PodRunning).Obj(), fixture.RankPod(j, 1).Name("ddp-1").Node("node-1").Phase(corev1.PodRunning).Obj())
	c.PrependReactor("delete", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, nil })
	code, out, errOut := run(t, c, "cancel", "ddp", "--timeout", "300ms")
	if code != int(exitcode.Timeout) || out != "" || !strings.Contains(errOut, "2 pods remain: ddp-0 (Running on node-1), ddp-1 (Running on node-1)") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestCancelReplacedJobIsNeverDeleted(t *testing.T) {
	j := fixture.Job("ddp").Namespace("default").Label("app.kubernetes.io/managed-by", "kubectl-tao").Obj()
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
	j := fixture.Job("ddp").Namespace("default").Label("app.kubernetes.io/managed-by", "kubectl-tao").Obj()
	c := fake.NewClientset(j, fixture.RankPod(j, 0).Name("ddp-0").Node("node-1").Phase(corev1.PodRunning).Obj())
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
	c := fake.NewClientset(fixture.Job("done").Namespace("default").Label("app.kubernetes.io/managed-by", "kubectl-tao").Condition(batchv1.JobComplete, "", "").Obj())
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
