package kueue

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
)

const busyQueue = `
metadata: {name: gpu-cq}
spec:
  cohortName: org
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: plain
      resources: [{name: cpu, nominalQuota: "100"}]
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100
      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: "16", borrowingLimit: "8"}]
status:
  pendingWorkloads: 3
  admittedWorkloads: 2
  flavorsReservation:
  - name: plain
    resources: [{name: cpu, total: "4"}]
  - name: h100
    resources: [{name: cpu, total: "2"}, {name: nvidia.com/gpu, total: "24", borrowed: "8"}]
  flavorsUsage:
  - name: h100
    resources: [{name: nvidia.com/gpu, total: "16"}]
`

// migAndWhole is a ClusterQueue of A100s cut into MIG slices (mixed strategy) beside whole
// H100s, in one flavor each.
const migAndWhole = `
metadata: {name: mixed-cq}
spec:
  resourceGroups:
  - flavors:
    - {name: h100, resources: [{name: nvidia.com/gpu, nominalQuota: "16"}]}
  - flavors:
    - {name: a100-mig, resources: [{name: nvidia.com/mig-1g.10gb, nominalQuota: "14"}]}
`

// The quota per GPU flavor in spec order, with what is reserved of each (not flavorsUsage:
// Kueue admits against reservations); flavors without GPUs are left out.
func TestClusterQueueFacts(t *testing.T) {
	got := ClusterQueueFacts(parse(t, busyQueue))
	want := ClusterQueue{Name: "gpu-cq", Cohort: "org", Pending: 3, Admitted: 2, Flavors: []jobstatus.FlavorQuota{
		{Flavor: "a100", Nominal: 8},
		{Flavor: "h100", Nominal: 16, BorrowingLimit: ptr.To[int64](8), Used: 24},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ClusterQueueFacts (-want +got):\n%s", diff)
	}
	if got := ClusterQueueFacts(parse(t, `metadata: {name: new}`)); got.Name != "new" || got.Flavors == nil || len(got.Flavors) != 0 || got.Pending != 0 {
		t.Errorf("a ClusterQueue Kueue has not written a status for: %+v", got)
	}
	// capacity --queues shows every GPU resource's quota, whole GPUs first, each named.
	mixed := ClusterQueueFacts(parse(t, migAndWhole))
	if diff := cmp.Diff([]jobstatus.FlavorQuota{{Flavor: "h100", Nominal: 16}, {Flavor: "a100-mig", Nominal: 14, Resource: "nvidia.com/mig-1g.10gb"}}, mixed.Flavors); diff != "" {
		t.Errorf("a ClusterQueue of whole GPUs and MIG slices (-want +got):\n%s", diff)
	}
}

func TestQueueFacts(t *testing.T) {
	lq := parse(t, `
metadata: {name: team-a, namespace: ml}
spec: {clusterQueue: gpu-cq}
status: {pendingWorkloads: 2}
`)
	got := QueueFacts(lq, parse(t, busyQueue), jobspec.GPUResource, 16)
	want := &jobstatus.QueueState{LocalQueue: "team-a", ClusterQueue: "gpu-cq", LocalQueuePending: 2,
		ClusterQueuePending: ptr.To[int32](3), ClusterQueueAdmitted: ptr.To[int32](2), GPUs: 16,
		Flavors: ClusterQueueFacts(parse(t, busyQueue)).Flavors, Stopped: []jobstatus.QueueStop{}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("QueueFacts (-want +got):\n%s", diff)
	}
	// A job of MIG slices is shown the quota of its slices, named in its words, never the
	// whole GPUs'.
	mixed := parse(t, migAndWhole+`
status:
  flavorsReservation:
  - {name: a100-mig, resources: [{name: nvidia.com/mig-1g.10gb, total: "3"}]}
`)
	slices := QueueFacts(lq, mixed, "nvidia.com/mig-1g.10gb", 2)
	if len(slices.Flavors) != 1 || slices.Flavors[0].String() != "3 of 14 nvidia.com/mig-1g.10gb used in flavor a100-mig" {
		t.Errorf("MIG job's flavors: %+v", slices.Flavors)
	}
	if whole := QueueFacts(lq, mixed, jobspec.GPUResource, 2); len(whole.Flavors) != 1 || whole.Flavors[0].String() != "0 of 16 nvidia.com/gpu used in flavor h100" {
		t.Errorf("whole-GPU job's flavors: %+v", whole.Flavors)
	}
	// A ClusterQueue that could not be read leaves its part unknown, not zero.
	got = QueueFacts(lq, nil, jobspec.GPUResource, 16)
	if got.ClusterQueue != "gpu-cq" || got.ClusterQueuePending != nil || got.ClusterQueueAdmitted != nil || len(got.Flavors) != 0 {
		t.Errorf("unread ClusterQueue: %+v", got)
	}
}

// What holds a queue whatever its quota: a stopPolicy an admin set on either queue (None is not
// a stop), and the ClusterQueue's Active condition when False for another reason than the stop.
func TestQueueFactsStoppedAndInactive(t *testing.T) {
	const (
		lq        = "metadata: {name: team-a, namespace: ml}\nspec: {clusterQueue: gpu-cq}\n"
		lqDrain   = "metadata: {name: team-a, namespace: ml}\nspec: {clusterQueue: gpu-cq, stopPolicy: HoldAndDrain}\n"
		cqRunning = `
metadata: {name: gpu-cq}
spec: {stopPolicy: None}
status:
  conditions: [{type: Active, status: "True", reason: Ready, message: Can admit new workloads}]
`
		cqHold = `
metadata: {name: gpu-cq}
spec: {stopPolicy: Hold}
status:
  conditions: [{type: Active, status: "False", reason: Stopped, message: "Can't admit new workloads: is stopped."}]
`
		cqNoFlavor = `
metadata: {name: gpu-cq}
spec: {}
status:
  conditions:
  - {type: Active, status: "False", reason: FlavorNotFound, message: "Can't admit new workloads: references missing ResourceFlavor(s): gone."}
`
	)
	cqStop := jobstatus.QueueStop{Kind: "ClusterQueue", Name: "gpu-cq", Policy: "Hold"}
	lqStop := jobstatus.QueueStop{Kind: "LocalQueue", Name: "team-a", Policy: "HoldAndDrain"}
	tests := []struct {
		name     string
		lq, cq   string
		stopped  []jobstatus.QueueStop
		inactive *jobstatus.QueueInactive
	}{
		{"active, stopPolicy None", lq, cqRunning, []jobstatus.QueueStop{}, nil},
		{"ClusterQueue held: the stop, not the condition", lq, cqHold, []jobstatus.QueueStop{cqStop}, nil},
		{"LocalQueue drained", lqDrain, cqRunning, []jobstatus.QueueStop{lqStop}, nil},
		{"both stopped, the ClusterQueue first", lqDrain, cqHold, []jobstatus.QueueStop{cqStop, lqStop}, nil},
		{"ClusterQueue names a missing flavor", lq, cqNoFlavor, []jobstatus.QueueStop{},
			&jobstatus.QueueInactive{Reason: "FlavorNotFound", Message: "Can't admit new workloads: references missing ResourceFlavor(s): gone."}},
		{"ClusterQueue unread: only the LocalQueue's stop is known", lqDrain, "", []jobstatus.QueueStop{lqStop}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var cq *unstructured.Unstructured
			if tc.cq != "" {
				cq = parse(t, tc.cq)
			}
			got := QueueFacts(parse(t, tc.lq), cq, jobspec.GPUResource, 8)
			if diff := cmp.Diff(tc.stopped, got.Stopped); diff != "" {
				t.Errorf("Stopped (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.inactive, got.Inactive); diff != "" {
				t.Errorf("Inactive (-want +got):\n%s", diff)
			}
		})
	}
}
