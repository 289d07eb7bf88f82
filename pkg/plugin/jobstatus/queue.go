package jobstatus

import (
	"fmt"
	"strings"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/jobspec"
)

// QueueState is where a queued job waits and for what: its LocalQueue, the ClusterQueue behind
// it and that ClusterQueue's GPU quota, as Kueue's own objects show them (the kueue engine reads
// them). It is part of `status -o json` (key "queue"), so its keys are a contract too.
//
// There is no queue position here: Kueue tells a workload's position only through its
// visibility API (visibility.kueue.x-k8s.io, the VisibilityOnDemand feature), a separate API
// server inside the manager reached through an APIService. A manager run without it (the local
// cluster's is, see test/localcluster/kueue.go) serves no such API, and neither the Workload
// nor the queues' status carries a position; the pending counts below are what every Kueue
// shows.
type QueueState struct {
	LocalQueue string `json:"localQueue"`
	// ClusterQueue is the LocalQueue's spec.clusterQueue.
	ClusterQueue string `json:"clusterQueue"`
	// LocalQueuePending is how many workloads wait in the LocalQueue (this one among them).
	LocalQueuePending int32 `json:"localQueuePending"`
	// ClusterQueuePending and ClusterQueueAdmitted are the ClusterQueue's counts; null when
	// it could not be read (ClusterQueues are cluster-scoped: a user may not be allowed to).
	ClusterQueuePending  *int32 `json:"clusterQueuePending"`
	ClusterQueueAdmitted *int32 `json:"clusterQueueAdmitted"`
	// GPUs is what the job asks for in all, the amount Kueue must find in one flavor.
	GPUs int64 `json:"gpus"`
	// Flavors is the ClusterQueue's GPU quota per ResourceFlavor (empty when it could not be
	// read, or covers no GPUs).
	Flavors []FlavorQuota `json:"flavors"`
}

// FlavorQuota is one ResourceFlavor's GPU quota in a ClusterQueue and how much of it is taken.
type FlavorQuota struct {
	Flavor string `json:"flavor"`
	// Nominal is the flavor's nominalQuota; BorrowingLimit its borrowingLimit (null: none set,
	// so unlimited within a cohort, nothing without one).
	Nominal        int64  `json:"nominal"`
	BorrowingLimit *int64 `json:"borrowingLimit"`
	// Used is the quota reserved by the ClusterQueue's workloads (its status.flavorsReservation:
	// those admitted and those being admitted), the amount Kueue compares with the quota.
	Used int64 `json:"used"`
}

// Free is what of the flavor's nominal quota is not used (never below 0: borrowing can take a
// queue past it).
func (f FlavorQuota) Free() int64 {
	return max(f.Nominal-f.Used, 0)
}

// String reads "16 of 16 nvidia.com/gpu used in flavor h100".
func (f FlavorQuota) String() string {
	return fmt.Sprintf("%d of %d %s used in flavor %s", f.Used, f.Nominal, jobspec.GPUResource, f.Flavor)
}

// Describe says in one clause what the queued job waits for: "ClusterQueue cq: 16 of 16
// nvidia.com/gpu used in flavor h100, the job needs 16; 2 pending in team-a, 3 in cq".
func (q *QueueState) Describe() string {
	if q == nil || q.ClusterQueue == "" {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "ClusterQueue %s", q.ClusterQueue)
	if len(q.Flavors) > 0 {
		parts := make([]string, len(q.Flavors))
		for i, f := range q.Flavors {
			parts[i] = f.String()
		}
		fmt.Fprintf(&b, ": %s, the job needs %d", strings.Join(parts, ", "), q.GPUs)
	}
	fmt.Fprintf(&b, "; %d pending in %s", q.LocalQueuePending, q.LocalQueue)
	if q.ClusterQueuePending != nil {
		fmt.Fprintf(&b, ", %d in %s", *q.ClusterQueuePending, q.ClusterQueue)
	}
	if q.ClusterQueueAdmitted != nil {
		fmt.Fprintf(&b, ", %d admitted", *q.ClusterQueueAdmitted)
	}
	return b.String()
}
