package kueue

import (
	"context"
	"errors"
	"reflect"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
)

// summary is a PendingWorkloadsSummary as Kueue v0.17's visibility server sends it.
const summary = `
kind: PendingWorkloadsSummary
apiVersion: visibility.kueue.x-k8s.io/v1beta2
metadata: {}
items:
- metadata: {name: job-second-7c4e1, namespace: ml, creationTimestamp: "2026-12-01T10:00:00Z"}
  priority: 0
  localQueueName: team-a
  positionInClusterQueue: 2
  positionInLocalQueue: 1
- metadata: {name: job-first-0a9b2, namespace: ml}
  localQueueName: team-a
  positionInClusterQueue: 0
  positionInLocalQueue: 0
- {localQueueName: team-a, positionInLocalQueue: 5}
`

func TestPendingPositions(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want map[string]jobstatus.Position
	}{
		{"two pending, the first at 0 and 0", summary, map[string]jobstatus.Position{
			"job-second-7c4e1": {LocalQueue: 1, ClusterQueue: 2},
			"job-first-0a9b2":  {LocalQueue: 0, ClusterQueue: 0},
		}},
		{"none pending", "kind: PendingWorkloadsSummary\nitems: []\n", map[string]jobstatus.Position{}},
		{"no items key", "kind: PendingWorkloadsSummary\n", map[string]jobstatus.Position{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := PendingPositions(parse(t, tc.doc)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("PendingPositions() = %v, want %v", got, tc.want)
			}
		})
	}
}

// withVisibility is discovery with Kueue's v1beta2 and its visibility API.
func withVisibility() []*metav1.APIResourceList {
	return append(served("v1beta2"), &metav1.APIResourceList{GroupVersion: VisibilityGroup + "/" + VisibilityVersion, APIResources: []metav1.APIResource{
		{Name: LocalQueues, Namespaced: true, Kind: "PendingWorkloadsSummary"},
		{Name: LocalQueues + "/" + PendingWorkloads, Namespaced: true, Kind: "PendingWorkloadsSummary", Verbs: []string{"get"}},
	}})
}

func queuedJob(ns, name, uid, queue string) batchv1.Job {
	return batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(uid), Labels: map[string]string{jobstatus.QueueLabel: queue}},
		Spec:       batchv1.JobSpec{Suspend: ptr.To(true)},
	}
}

func TestAddPositions(t *testing.T) {
	jobs := []batchv1.Job{
		queuedJob("ml", "first", "u1", "team-a"),
		queuedJob("ml", "second", "u2", "team-a"),
		queuedJob("ml", "other", "u3", "team-b"),
		queuedJob("ml", "gone", "u4", "team-a"), // pending in no answer: admitted meanwhile
	}
	fresh := func() map[types.UID]*jobstatus.Workload {
		return map[types.UID]*jobstatus.Workload{
			"u1": {Name: "job-first-0a9b2"}, "u2": {Name: "job-second-7c4e1"}, "u3": {Name: "job-other-1"}, "u4": {Name: "job-gone-1"},
		}
	}
	tests := []struct {
		name      string
		resources []*metav1.APIResourceList
		getErr    error
		want      map[types.UID]*jobstatus.Position
		wantReads int
		wantErr   bool
	}{
		{"served: one read per LocalQueue", withVisibility(), nil, map[types.UID]*jobstatus.Position{
			"u1": {LocalQueue: 0, ClusterQueue: 0}, "u2": {LocalQueue: 1, ClusterQueue: 2},
		}, 2, false},
		{"not served: no read, no positions", served("v1beta2"), nil, map[types.UID]*jobstatus.Position{}, 0, false},
		{"forbidden by RBAC: silently none", withVisibility(), apierrors.NewForbidden(VisibilityGVR.GroupResource(), "team-a", errors.New("no")), map[types.UID]*jobstatus.Position{}, 2, false},
		{"served but failing: an error", withVisibility(), apierrors.NewServiceUnavailable("the server is currently unable to handle the request"), map[types.UID]*jobstatus.Position{}, 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset()
			c.Resources = tc.resources
			dyn := fakeDynamic()
			reads := 0
			dyn.PrependReactor("get", LocalQueues, func(a k8stesting.Action) (bool, runtime.Object, error) {
				g := a.(k8stesting.GetAction)
				if g.GetResource() != VisibilityGVR || g.GetSubresource() != PendingWorkloads || g.GetNamespace() != "ml" {
					t.Errorf("unexpected get %v %s/%s/%s", g.GetResource(), g.GetNamespace(), g.GetName(), g.GetSubresource())
				}
				reads++
				if tc.getErr != nil {
					return true, nil, tc.getErr
				}
				if g.GetName() == "team-a" {
					return true, parse(t, summary), nil
				}
				return true, &unstructured.Unstructured{Object: map[string]any{"kind": "PendingWorkloadsSummary", "apiVersion": VisibilityGroup + "/" + VisibilityVersion, "items": []any{}}}, nil
			})
			wls := fresh()
			err := AddPositions(context.Background(), c.Discovery(), dyn, jobs, wls)
			if (err != nil) != tc.wantErr {
				t.Fatalf("AddPositions() error = %v, want error %v", err, tc.wantErr)
			}
			if reads != tc.wantReads {
				t.Errorf("%d visibility reads, want %d", reads, tc.wantReads)
			}
			for uid, wl := range wls {
				if want := tc.want[uid]; !reflect.DeepEqual(wl.Position, want) {
					t.Errorf("%s: position %v, want %v", uid, wl.Position, want)
				}
			}
		})
	}
}

// A job that does not wait in a queue costs no read, not even discovery.
func TestAddPositionsNothingQueued(t *testing.T) {
	c := fake.NewClientset()
	job := queuedJob("ml", "running", "u1", "team-a")
	job.Spec.Suspend = ptr.To(false)
	if err := AddPositions(context.Background(), c.Discovery(), fakeDynamic(), []batchv1.Job{job}, map[types.UID]*jobstatus.Workload{"u1": {Name: "w"}}); err != nil {
		t.Fatal(err)
	}
	if n := len(c.Actions()); n != 0 {
		t.Errorf("%d requests for a job that does not wait in a queue: %v", n, c.Actions())
	}
}
