package triage

import (
	"fmt"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
)

// incompleteFinding explains a Job left by a submit that never finished (jobstatus.WithSubmit
// says IncompleteSubmit): kubectl-tao created it suspended and was stopped, or its rollback
// failed, before it started it. No pod will ever exist; the fix is to remove it and submit
// again. A Job still inside the submit grace is not one: its submit may be running.
func incompleteFinding(s *Snapshot) *NodeEvent {
	if s.Job == nil {
		return nil
	}
	r := jobstatus.WithSubmit(jobstatus.Of(s.Job, s.Pods), s.Job, s.Now)
	if r.Reason != jobstatus.IncompleteSubmit {
		return nil
	}
	job := s.Job
	return &NodeEvent{
		NodeEventName: string(jobstatus.IncompleteSubmit), Rank: -1, Time: timePtr(job.CreationTimestamp.Time), ErrClass: ErrInfra,
		Message: "the submit that created this job never finished: kubectl-tao creates a job suspended, then its Service, " +
			"Secrets and ConfigMaps, then starts it; the submit was interrupted (killed, or its connection lost) before the " +
			"last step, or removing what it had made failed. Nothing will start it, and some of its objects may be missing",
		Suggestion: fmt.Sprintf("Remove it with `%s` (it and whatever it owns go, in the foreground), then submit it again.",
			jobstatus.RemoveCommand(job)),
	}
}

// waitingFinding is why a job without pods has none, when the Job alone says: it waits in a
// Kueue queue, or its submit never finished.
func waitingFinding(s *Snapshot) *NodeEvent {
	if q := queuedFinding(s); q != nil {
		return q
	}
	return incompleteFinding(s)
}
