package jobstatus

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
)

// QueueState is where a queued job waits and for what: its LocalQueue, the ClusterQueue behind
// it and that ClusterQueue's GPU quota, as Kueue's own objects show them (the kueue engine reads
// them). It is part of `status -o json` (key "queue"), so its keys are a contract too.
//
// The positions come from Kueue's visibility API (visibility.kueue.x-k8s.io, the
// VisibilityOnDemand feature), a separate API server inside the manager reached through an
// APIService: neither the Workload nor the queues' status carries a position. A cluster whose
// Kueue runs without it, or a user its RBAC does not let read it, gets null positions; the
// pending counts are what every Kueue shows.
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
	// PositionInLocalQueue and PositionInClusterQueue are the job's place among the workloads
	// pending in each queue, 0-based as Kueue counts them (0: the next it considers); null
	// when unknown (see above). Human output says them 1-based (Position.String).
	PositionInLocalQueue   *int32 `json:"positionInLocalQueue"`
	PositionInClusterQueue *int32 `json:"positionInClusterQueue"`
	// GPUs is what the job asks for in all, the amount Kueue must find in one flavor.
	GPUs int64 `json:"gpus"`
	// Flavors is the ClusterQueue's GPU quota per ResourceFlavor (empty when it could not be
	// read, or covers no GPUs).
	Flavors []FlavorQuota `json:"flavors"`
	// Stopped lists the queues an admin stopped (spec.stopPolicy Hold or HoldAndDrain), the
	// ClusterQueue first: Kueue admits nothing from them until they are resumed. Empty when
	// neither is (the ClusterQueue's part unknown when it could not be read).
	Stopped []QueueStop `json:"stopped"`
	// Inactive is set when Kueue marks the ClusterQueue inactive for another reason than a stop
	// (its Active condition False: a ResourceFlavor or AdmissionCheck it names does not exist,
	// ...), with Kueue's reason and message; null when it is active or could not be read.
	Inactive *QueueInactive `json:"inactive"`
}

// Position is a pending workload's place in its LocalQueue and in its ClusterQueue, 0-based
// as Kueue's visibility API gives them (its PendingWorkload's positionInLocalQueue and
// positionInClusterQueue).
type Position struct {
	LocalQueue, ClusterQueue int32
}

// Human is the 1-based position a person reads: 1 is the next Kueue considers.
func Human(p int32) int32 { return p + 1 }

// SetPosition records p in q (nothing when either is nil).
func (q *QueueState) SetPosition(p *Position) {
	if q == nil || p == nil {
		return
	}
	q.PositionInLocalQueue, q.PositionInClusterQueue = &p.LocalQueue, &p.ClusterQueue
}

// QueueStop is one stopped queue: its kind (ClusterQueue or LocalQueue), name and stopPolicy.
type QueueStop struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Policy string `json:"stopPolicy"`
}

// QueueInactive is the reason and message of a ClusterQueue's False Active condition.
type QueueInactive struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
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
	// Resource is the GPU resource the quota is of: the job's (jobspec.GPUResourceOf), or one
	// of the ClusterQueue's in capacity --queues; "" (left out) for whole GPUs.
	Resource corev1.ResourceName `json:"resource,omitempty"`
}

// GPU is the GPU resource the quota is of.
func (f FlavorQuota) GPU() corev1.ResourceName { return jobspec.GPUResourceOr(f.Resource) }

// Free is what of the flavor's nominal quota is not used (never below 0: borrowing can take a
// queue past it).
func (f FlavorQuota) Free() int64 {
	return max(f.Nominal-f.Used, 0)
}

// String reads "16 of 16 nvidia.com/gpu used in flavor h100".
func (f FlavorQuota) String() string {
	return fmt.Sprintf("%d of %d %s used in flavor %s", f.Used, f.Nominal, f.GPU(), f.Flavor)
}

// Held says in one clause why nothing is admitted from the job's queue now, whatever the
// quota: "ClusterQueue cq is stopped (Hold): nothing is admitted until an admin resumes it".
// "" when no queue is stopped or inactive. A stop and an inactive ClusterQueue are an admin's
// to undo, and last only until then: the job waits, it is not refused.
func (q *QueueState) Held() string {
	if q == nil {
		return ""
	}
	var parts []string
	for _, s := range q.Stopped {
		parts = append(parts, fmt.Sprintf("%s %s is stopped (%s)", s.Kind, s.Name, s.Policy))
	}
	verb := "resumes"
	if q.Inactive != nil {
		parts = append(parts, fmt.Sprintf("ClusterQueue %s is inactive (%s)", q.ClusterQueue, ReasonMessage(q.Inactive.Reason, q.Inactive.Message)))
		verb = "fixes"
		if len(q.Stopped) > 0 {
			verb = "resumes and fixes"
		}
	}
	if len(parts) == 0 {
		return ""
	}
	them := "it"
	if len(parts) > 1 {
		them = "them"
	}
	return fmt.Sprintf("%s: nothing is admitted until an admin %s %s", strings.Join(parts, " and "), verb, them)
}

// Describe says in one clause what the queued job waits for: "ClusterQueue cq: 16 of 16
// nvidia.com/gpu used in flavor h100, the job needs 16; 2 pending in team-a, 3 in cq", and
// with its position known "...; position 2 of 2 pending in team-a, 3 of 3 in cq" (1-based).
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
	b.WriteString("; ")
	// The counts are the queues' status, which Kueue writes a moment after its queues change
	// (and not at all for a stopped ClusterQueue), the positions its live view: a job at
	// position n means at least n pending, never "position 1 of 0".
	lqPending := q.LocalQueuePending
	if q.PositionInLocalQueue != nil {
		lqPending = max(lqPending, Human(*q.PositionInLocalQueue))
		fmt.Fprintf(&b, "position %d of ", Human(*q.PositionInLocalQueue))
	}
	fmt.Fprintf(&b, "%d pending in %s", lqPending, q.LocalQueue)
	switch cqPos := q.PositionInClusterQueue; {
	case q.ClusterQueuePending != nil && cqPos != nil:
		fmt.Fprintf(&b, ", %d of %d in %s", Human(*cqPos), max(*q.ClusterQueuePending, Human(*cqPos)), q.ClusterQueue)
	case q.ClusterQueuePending != nil:
		fmt.Fprintf(&b, ", %d in %s", *q.ClusterQueuePending, q.ClusterQueue)
	case cqPos != nil:
		fmt.Fprintf(&b, ", position %d in %s", Human(*cqPos), q.ClusterQueue)
	}
	if q.ClusterQueueAdmitted != nil {
		fmt.Fprintf(&b, ", %d admitted", *q.ClusterQueueAdmitted)
	}
	return b.String()
}
