package triage

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
)

// Stuck is why a job cannot start, as wait and logs -f say it while they wait: a rank whose pod
// will not get further by itself, or a Kueue Workload that will never be admitted.
type Stuck struct {
	// Rank is the lowest rank that cannot start; -1 when the whole job is held (Kueue).
	Rank int
	// Pod is that rank's pod, "" for a job Kueue holds.
	Pod string
	// Issue is the rank's readiness issue as replicas shows it, or Kueue's reason and words.
	Issue Issue
	// Others is how many more ranks cannot start (with this issue or another).
	Others int
	// NotAdmitted is set when Kueue will never admit the job (Inadmissible, Deactivated):
	// nothing will change by waiting, so a wait ends at once.
	NotAdmitted bool
}

// stuckReasons are the readiness issues (finding names) of a pod that stays where it is until
// someone acts: an image that cannot be pulled, a container the kubelet cannot create, a pod
// the scheduler cannot place. A crash loop is not here: the rank started and its logs say why.
var stuckReasons = map[string]bool{
	"CreateContainerConfigError":    true,
	"CreateContainerError":          true,
	corev1.PodReasonUnschedulable:   true,
	"NoMatchingNode":                true,
	"UntoleratedTaint":              true,
	"PersistentVolumeClaimNotBound": true,
}

func isStuckReason(name string) bool { return stuckReasons[name] || imageReasons[name] }

// StuckOf decides whether a job that has not ended cannot start. pods are the Job's own pods
// (jobpods.Keep); the same rules as replicas judge each one, read from the pods alone (no
// events, nodes or clock), so the result changes only when a pod does. r is the job's status
// as jobstatus (and, for a queued job, jobstatus.WithWorkload) made it: Inadmissible or
// Deactivated is Kueue's final word. nil when nothing is stuck, or the job has ended.
func StuckOf(job *batchv1.Job, pods []corev1.Pod, r jobstatus.Result) *Stuck {
	if r.Status.Terminal() {
		return nil
	}
	if r.Reason == jobstatus.Inadmissible || r.Reason == jobstatus.Deactivated {
		return &Stuck{Rank: -1, Issue: Issue{Reason: string(r.Reason), Message: r.Message}, NotAdmitted: true}
	}
	var out *Stuck
	for _, in := range inspectAll(&Snapshot{Job: job, Pods: pods}) {
		if in.finding == nil || !live(in.pod) || !isStuckReason(in.finding.name) {
			continue
		}
		if out != nil {
			out.Others++
			continue
		}
		out = &Stuck{Rank: in.rank, Pod: in.pod.Name, Issue: Issue{Reason: in.finding.name, Message: in.finding.message}}
	}
	return out
}

// Line is the one stderr line that says it, with the command that explains it.
//
//	rank 1 (pod train-1-x7k2p) cannot start: ImagePullBackOff: ... (and 1 more rank); see why: kubectl tao diagnose train -n ml
func (s *Stuck) Line(job, namespace string) string {
	what := fmt.Sprintf("rank %d (pod %s) cannot start", s.Rank, s.Pod)
	if s.Rank < 0 {
		what = "Kueue will not admit the job"
	}
	issue := s.Issue.Reason
	if s.Issue.Message != "" {
		issue += ": " + s.Issue.Message
	}
	more := ""
	switch {
	case s.Others == 1:
		more = " (and 1 more rank)"
	case s.Others > 1:
		more = fmt.Sprintf(" (and %d more ranks)", s.Others)
	}
	return fmt.Sprintf("%s: %s%s; see why: kubectl tao diagnose %s -n %s", what, issue, more, job, namespace)
}

// Same reports whether two findings say the same thing: a wait says a finding again only when
// it changes (another rank first, another kind of issue), not when a message's details do (the
// kubelet's back-off times, the scheduler's node counts), nor when the kubelet flips between
// ErrImagePull and ImagePullBackOff at each retry of a pull.
func (s *Stuck) Same(o *Stuck) bool {
	if s == nil || o == nil {
		return s == o
	}
	return s.Rank == o.Rank && kind(s.Issue.Reason) == kind(o.Issue.Reason) && s.NotAdmitted == o.NotAdmitted
}

// kind groups the reasons that are one issue seen at different moments.
func kind(reason string) string {
	if imageReasons[reason] {
		return "image"
	}
	return reason
}
