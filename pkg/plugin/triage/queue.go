package triage

import (
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/jobstatus"
)

// kueueGroup is Kueue's API group; its Workload objects stand for queued Jobs.
const kueueGroup = "kueue.x-k8s.io"

// queuedIn is the LocalQueue a Job waits in for Kueue to admit it, "" when it does not wait:
// labelled for a queue and suspended (Kueue admits by resuming it).
func queuedIn(job *batchv1.Job) string {
	if job == nil || job.Spec.Suspend == nil || !*job.Spec.Suspend {
		return ""
	}
	return jobstatus.Queue(job)
}

// isWorkloadOf reports whether an event is about the Kueue Workload of job. Kueue names it
// "job-<job name>-<5 characters>", the prefix cut to fit 253 (or, with ShortWorkloadNames,
// 63) characters; events carry no owner, so the name is what ties them to the Job.
func isWorkloadOf(job *batchv1.Job, ref corev1.ObjectReference) bool {
	if ref.Kind != "Workload" || !strings.HasPrefix(ref.APIVersion, kueueGroup+"/") || ref.Namespace != job.Namespace {
		return false
	}
	for _, max := range []int{253, 63} {
		prefix := "job-" + job.Name
		if limit := max - 6; len(prefix) > limit {
			prefix = prefix[:limit]
		}
		if len(ref.Name) == len(prefix)+6 && strings.HasPrefix(ref.Name, prefix+"-") {
			return true
		}
	}
	return false
}

// queuedFinding explains a Job that waits in a Kueue queue: no pod exists until Kueue admits
// it. Kueue's own reason (its scheduler's latest "Pending" event on the Workload, such as
// missing quota) is added when the namespace's events hold one; Collect reads them anyway, so
// this costs no request.
func queuedFinding(s *Snapshot) *NodeEvent {
	queue := queuedIn(s.Job)
	if queue == "" {
		return nil
	}
	job := s.Job
	msg := fmt.Sprintf("queued in %s, not admitted yet: Kueue starts all %d ranks at once when the queue has room for them",
		queue, jobstatus.Nodes(job))
	at := job.CreationTimestamp.Time
	if e := latestWorkloadEvent(s); e != nil {
		msg += "; Kueue says: " + e.Message
		at = eventTime(*e)
	}
	return &NodeEvent{
		NodeEventName: "Queued", Rank: -1, Message: msg, Time: timePtr(at), ErrClass: ErrInfra,
		Suggestion: fmt.Sprintf("The job waits for Kueue to admit it from LocalQueue %s (its ClusterQueue needs free quota for "+
			"every rank). See why with `kubectl get workloads -n %s` and `kubectl describe localqueue %s -n %s`; if the "+
			"queue does not exist, cancel with `kubectl tao cancel %s -n %s` and resubmit with an existing --queue "+
			"(`kubectl tao preflight --queue NAME` checks it).", queue, job.Namespace, queue, job.Namespace, job.Name, job.Namespace),
	}
}

func latestWorkloadEvent(s *Snapshot) *corev1.Event {
	var best *corev1.Event
	for i := range s.Events {
		e := &s.Events[i]
		if !isWorkloadOf(s.Job, e.InvolvedObject) {
			continue
		}
		if best == nil || eventTime(*e).After(eventTime(*best)) {
			best = e
		}
	}
	return best
}
