package jobdelete

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/outage"
)

// WaitGone waits out an API server that answers 503 for a while (the Job already gone), and
// ends at once, with the error, on an answer that is not an outage.
func TestWaitGoneThroughOutage(t *testing.T) {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns", UID: "u1"}}
	for _, tc := range []struct {
		name    string
		fail    error
		times   int
		wantErr bool
	}{
		{"503s, then gone", apierrors.NewServiceUnavailable("restarting"), 3, false},
		{"429s, then gone", apierrors.NewTooManyRequests("slow down", 0), 2, false},
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Group: "batch", Resource: "jobs"}, "", errors.New("no")), 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			lists := 0
			client.PrependReactor("list", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
				lists++
				if lists <= tc.times {
					return true, nil, tc.fail
				}
				return false, nil, nil
			})
			var errOut bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := WaitGone(ctx, client, job, time.Minute, outage.New(&errOut, "waiting", nil))
			switch {
			case tc.wantErr && err == nil:
				t.Fatalf("WaitGone returned nil after %d lists, want the error", lists)
			case tc.wantErr && lists != 1:
				t.Fatalf("WaitGone listed %d times on a %v, want 1 (no retry)", lists, tc.fail)
			case !tc.wantErr && err != nil:
				t.Fatalf("WaitGone: %v", err)
			case !tc.wantErr && lists != tc.times+1:
				t.Fatalf("WaitGone listed %d times, want %d", lists, tc.times+1)
			}
		})
	}
}

// TestWaitGoneRequests counts what waiting for a Job and its pods to go sends: one list and
// one watch of each, then only the watches' events as they go; a Job already gone is listed
// and not watched.
func TestWaitGoneRequests(t *testing.T) {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns", UID: "u1"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "j-0", Namespace: "ns", UID: "p1",
		Labels: map[string]string{"batch.kubernetes.io/controller-uid": "u1"}}}
	if jobpods.UIDSelector(job.UID) != "batch.kubernetes.io/controller-uid=u1" {
		t.Fatalf("the pods' selector is %q: fix the test's label", jobpods.UIDSelector(job.UID))
	}
	counts := func(c *fake.Clientset) map[string]int {
		n := map[string]int{}
		for _, a := range c.Actions() {
			if a.GetVerb() == "list" || a.GetVerb() == "watch" {
				n[a.GetVerb()+" "+a.GetResource().Resource]++
			}
		}
		return n
	}
	t.Run("still there", func(t *testing.T) {
		c := fake.NewClientset(job, pod)
		watches := make(chan struct{}, 2)
		c.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
			w, err := c.Tracker().Watch(a.GetResource(), a.GetNamespace(), a.(k8stesting.WatchActionImpl).ListOptions)
			watches <- struct{}{}
			return true, w, err
		})
		done := make(chan error, 1)
		go func() {
			done <- WaitGone(context.Background(), c, job, time.Minute, outage.New(&bytes.Buffer{}, "waiting", nil))
		}()
		<-watches
		<-watches
		ctx := context.Background()
		if err := c.CoreV1().Pods("ns").Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c.BatchV1().Jobs("ns").Delete(ctx, job.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("WaitGone did not end")
		}
		want := map[string]int{"list jobs": 1, "list pods": 1, "watch jobs": 1, "watch pods": 1}
		if got := counts(c); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("requests %v, want %v", got, want)
		}
	})
	t.Run("already gone", func(t *testing.T) {
		c := fake.NewClientset()
		if err := WaitGone(context.Background(), c, job, time.Minute, outage.New(&bytes.Buffer{}, "waiting", nil)); err != nil {
			t.Fatal(err)
		}
		want := map[string]int{"list jobs": 1, "list pods": 1}
		if got := counts(c); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("requests %v, want %v", got, want)
		}
	})
}
