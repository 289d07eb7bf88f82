package jobstatus

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
)

// Reason says why a job is in its status where the status alone does not tell: a Pending job
// that a queue holds back, say. "" when there is nothing to add. It is the one field for every
// such cause: each is filled by the engine that knows it (kueue: the Job's Workload and its
// ClusterQueue), so status, list and wait show them alike.
type Reason string

// Why a queued job (submit --queue) is Pending, from Kueue's Workload of it.
const (
	// Queued: waiting for Kueue to admit it (for quota, or behind other workloads).
	Queued Reason = "Queued"
	// Preempted: Kueue suspended it again to make room for another workload, and requeued it.
	Preempted Reason = "Preempted"
	// Inadmissible: its ClusterQueue's quota can never hold it (computed from the quota).
	Inadmissible Reason = "Inadmissible"
	// Deactivated: Kueue gave up on it (spec.active false, e.g. after waitForPodsReady's
	// requeue limit); nothing will admit it again by itself.
	Deactivated Reason = "Deactivated"
)

// Workload is what Kueue's Workload of a queued Job says, as the kueue engine reads it.
type Workload struct {
	// Name is the Workload's name (Kueue's visibility API names pending workloads by it).
	Name string
	// Position is its place in its queues while it is pending, from Kueue's visibility API;
	// nil when unknown (no such API, not allowed to read it, or not pending).
	Position *Position
	// Inactive is spec.active false: Kueue deactivated the Workload.
	Inactive bool
	// Pending is the message of the False QuotaReserved condition ("couldn't assign flavors
	// ... insufficient unused quota ..."): why Kueue cannot admit it now.
	Pending string
	// EvictedReason and EvictedMessage are the True Evicted condition's ("Preempted",
	// "DeactivatedDueToRequeuingLimitExceeded", ...).
	EvictedReason, EvictedMessage string
	// NeverFits explains why the ClusterQueue's quota can never hold the job, "" when it can or
	// that is not known.
	NeverFits string
	// Queue is where it waits and the quota it waits for; nil when the LocalQueue could not
	// be read.
	Queue *QueueState
}

// evictedPreempted is the Evicted condition's reason when Kueue preempted the Workload.
const evictedPreempted = "Preempted"

// WithWorkload refines the result of a Job waiting in a Kueue queue (Pending, labelled for a
// LocalQueue, suspended) with what its Workload says; any other result is returned unchanged.
// wl is nil when Kueue has not made a Workload yet (or it could not be read): the job is
// Queued.
func WithWorkload(r Result, job *batchv1.Job, wl *Workload) Result {
	q := Queue(job)
	if r.Status != Pending || q == "" || job.Spec.Suspend == nil || !*job.Spec.Suspend {
		return r
	}
	r.Reason, r.Message = Queued, "queued in "+q
	if wl == nil {
		return r
	}
	switch {
	case wl.Inactive:
		r.Reason, r.Message = Deactivated, "Kueue deactivated it; it will not be admitted again unless reactivated"
		if wl.EvictedMessage != "" {
			r.Message = wl.EvictedMessage
		}
	case wl.NeverFits != "":
		r.Reason, r.Message = Inadmissible, wl.NeverFits
	case wl.EvictedReason == evictedPreempted:
		r.Reason, r.Message = Preempted, "preempted and requeued in "+q
		if wl.EvictedMessage != "" {
			r.Message += ": " + wl.EvictedMessage
		}
	case wl.Queue.Held() != "":
		// A stopped or inactive queue admits nothing, whatever the quota: that comes first, in
		// words of the queue's own spec and status (Kueue's Pending message only echoes it).
		// It is an admin's to undo and lasts only until then, so the job stays Queued, not
		// Inadmissible: a wait goes on.
		r.Held = wl.Queue.Held()
		r.Message += ": " + r.Held
	case wl.Pending != "":
		r.Message += ": " + wl.Pending
	}
	if r.Reason == Preempted && wl.Queue.Held() != "" {
		r.Held = wl.Queue.Held()
		r.Message += "; " + r.Held
	}
	if r.Reason == Queued || r.Reason == Preempted {
		r.Position = wl.Position
	}
	if d := wl.Queue.Describe(); d != "" && (r.Reason == Queued || r.Reason == Preempted) {
		// What it waits for, from the quota itself: Kueue's message names only the shortfall.
		r.Message += "; " + d
	}
	return r
}

// Shown is how the status reads in a table's STATUS column: the reason where there is one, as
// kubectl shows a pod's reason in place of its phase.
// A queued job whose position is known shows it, 1-based, after a colon as kubectl shows a
// pod's init progress ("Init:0/1"): "Queued:2" is second in its LocalQueue.
func (r Result) Shown() string {
	if r.Position != nil && (r.Reason == Queued || r.Reason == Preempted) {
		return fmt.Sprintf("%s:%d", r.Reason, Human(r.Position.LocalQueue))
	}
	if r.Reason != "" {
		return string(r.Reason)
	}
	return string(r.Status)
}
