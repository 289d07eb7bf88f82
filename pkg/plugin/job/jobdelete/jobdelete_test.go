package jobdelete

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

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
