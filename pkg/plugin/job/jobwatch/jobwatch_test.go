package jobwatch

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/outage"
)

func job(name string, uid types.UID) *batchv1.Job {
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: uid}}
}

func pod(uid types.UID) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: string(uid), Namespace: "ns", UID: uid}}
}

// TestStateApply: what a Job's state becomes after each kind of update.
func TestStateApply(t *testing.T) {
	for _, tc := range []struct {
		name     string
		updates  []Update
		wantJob  types.UID // "" when absent
		wantPods int
	}{
		{"a list sets the Job", []Update{{Resync: true, Objects: []runtime.Object{job("other", "o"), job("train", "u1")}}}, "u1", 0},
		{"a list without it clears it", []Update{{Event: watch.Event{Type: watch.Added, Object: job("train", "u1")}}, {Resync: true}}, "", 0},
		{"another Job's event is ignored", []Update{{Event: watch.Event{Type: watch.Added, Object: job("other", "o")}}}, "", 0},
		{"a deletion of the Job clears it", []Update{{Event: watch.Event{Type: watch.Added, Object: job("train", "u1")}}, {Event: watch.Event{Type: watch.Deleted, Object: job("train", "u1")}}}, "", 0},
		{"a deletion of a replaced Job keeps the new one", []Update{{Event: watch.Event{Type: watch.Added, Object: job("train", "u2")}}, {Event: watch.Event{Type: watch.Deleted, Object: job("train", "u1")}}}, "u2", 0},
		{"pods come and go", []Update{
			{Pod: true, Event: watch.Event{Type: watch.Added, Object: pod("p1")}},
			{Pod: true, Event: watch.Event{Type: watch.Added, Object: pod("p2")}},
			{Pod: true, Event: watch.Event{Type: watch.Deleted, Object: pod("p1")}},
		}, "", 1},
		{"a pod list replaces the pods", []Update{
			{Pod: true, Event: watch.Event{Type: watch.Added, Object: pod("p1")}},
			{Pod: true, Resync: true, Objects: []runtime.Object{pod("p2"), pod("p3")}},
		}, "", 2},
		{"an error changes nothing", []Update{{Event: watch.Event{Type: watch.Added, Object: job("train", "u1")}}, {Resync: true, Err: errors.New("x")}}, "u1", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState("train")
			for _, u := range tc.updates {
				s.Apply(u)
			}
			var got types.UID
			if s.Job != nil {
				got = s.Job.UID
			}
			if got != tc.wantJob || len(s.Pods) != tc.wantPods {
				t.Errorf("job %q, %d pods; want %q, %d", got, len(s.Pods), tc.wantJob, tc.wantPods)
			}
		})
	}
}

func retry(errOut *bytes.Buffer) Retry {
	return Retry{Reach: outage.New(errOut, "following", nil), ErrOut: errOut,
		Backoff: func() *wait.Backoff { return outage.Backoff(time.Millisecond, 10*time.Millisecond) }}
}

func next(t *testing.T, out <-chan Update) Update {
	t.Helper()
	select {
	case u := <-out:
		return u
	case <-time.After(10 * time.Second):
		t.Fatal("no update")
	}
	return Update{}
}

// TestRunResumesAndRelists: a watch that closes is reopened from the last version seen (a
// bookmark's included, which is not sent on); one that expires (410) makes a new list, sent
// whole, and the watch goes on from its version.
func TestRunResumesAndRelists(t *testing.T) {
	c := fake.NewClientset(job("train", "u1"))
	var (
		mu  sync.Mutex
		rvs []string
	)
	c.PrependReactor("list", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &batchv1.JobList{ListMeta: metav1.ListMeta{ResourceVersion: "60"}, Items: []batchv1.Job{*job("train", "u1")}}, nil
	})
	c.PrependWatchReactor("jobs", func(a k8stesting.Action) (bool, watch.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		rvs = append(rvs, a.(k8stesting.WatchActionImpl).ListOptions.ResourceVersion)
		w := watch.NewFakeWithChanSize(3, false)
		switch len(rvs) {
		case 1:
			changed := job("train", "u1")
			changed.ResourceVersion = "45"
			w.Modify(changed)
			w.Action(watch.Bookmark, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "50"}})
			w.Stop()
		case 2:
			w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired})
			w.Stop()
		}
		return true, w, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan Update)
	var errOut bytes.Buffer
	go Run(ctx, "40", JobSource(c, "ns", "train"), retry(&errOut), out)
	if u := next(t, out); u.Resync || u.Event.Type != watch.Modified {
		t.Fatalf("first update %+v, want the watch's Modified", u)
	}
	if u := next(t, out); !u.Resync || len(u.Objects) != 1 {
		t.Fatalf("second update %+v, want the new list after the 410", u)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		mu.Lock()
		n := len(rvs)
		mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no watch after the new list")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	mu.Lock()
	defer mu.Unlock()
	if rvs[0] != "40" || rvs[1] != "50" || rvs[2] != "60" {
		t.Errorf("watches from %v, want 40, then the bookmark's 50, then the new list's 60", rvs)
	}
}

// TestRunFatal: a failure the source's Fatal picks ends the stream with it; an outage is
// retried quietly, and one other failure is said once.
func TestRunFatal(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "batch", Resource: "jobs"}, "", errors.New("no"))
	for _, tc := range []struct {
		name      string
		fail      []error
		fatal     bool
		wantLines int
	}{
		{"503s, then a list", []error{apierrors.NewServiceUnavailable("x"), apierrors.NewServiceUnavailable("x")}, true, 0},
		{"forbidden, fatal", []error{forbidden}, true, 0},
		{"forbidden, retried and said once", []error{forbidden, forbidden, forbidden}, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset()
			lists := 0
			c.PrependReactor("list", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
				lists++
				if lists <= len(tc.fail) {
					return true, nil, tc.fail[lists-1]
				}
				return false, nil, nil
			})
			src := JobSource(c, "ns", "train")
			if tc.fatal {
				src.Fatal = func(err error, listing bool) bool { return listing && !outage.Is(err) }
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out := make(chan Update)
			var errOut bytes.Buffer
			go Run(ctx, "", src, retry(&errOut), out)
			u := next(t, out)
			cancel()
			wantErr := tc.fatal && tc.fail[0] == forbidden
			if (u.Err != nil) != wantErr || (wantErr && !u.Listing) || (!wantErr && !u.Resync) {
				t.Fatalf("update %+v, want error %v", u, wantErr)
			}
			if n := bytes.Count(errOut.Bytes(), []byte("\n")); n != tc.wantLines {
				t.Errorf("stderr %q, want %d lines", errOut.String(), tc.wantLines)
			}
		})
	}
}
