package triage

import (
	"fmt"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
)

// inspected is one pod with what the rules found about it.
type inspected struct {
	pod     *corev1.Pod
	rank    int
	finding *finding
}

// inspectAll runs the rules over every pod, in rank order (then oldest first, so a replacement
// pod follows the one it replaced).
func inspectAll(s *Snapshot) []inspected {
	evs := eventsByPod(s)
	out := make([]inspected, len(s.Pods))
	for i := range s.Pods {
		pod := &s.Pods[i]
		v := podView{s: s, pod: pod, rank: jobpods.Rank(pod), events: evs[i]}
		out[i] = inspected{pod: pod, rank: v.rank, finding: v.inspect()}
	}
	sort.SliceStable(out, func(a, b int) bool {
		pa, pb := out[a].pod, out[b].pod
		if out[a].rank != out[b].rank {
			return out[a].rank < out[b].rank
		}
		if !pa.CreationTimestamp.Equal(&pb.CreationTimestamp) {
			return pa.CreationTimestamp.Before(&pb.CreationTimestamp)
		}
		return pa.Name < pb.Name
	})
	return out
}

// Replicas is the SDK's get_job_replicas: one entry per pod, in rank order, plus job-level
// notes (a partial start) that have no place in a per-pod entry.
func Replicas(s Snapshot) ([]Replica, []string) {
	all := inspectAll(&s)
	out := make([]Replica, 0, len(all))
	for _, in := range all {
		r := Replica{
			Name:     in.pod.Name,
			Rank:     in.rank,
			Node:     in.pod.Spec.NodeName,
			Phase:    string(in.pod.Status.Phase),
			Ready:    readyCount(in.pod),
			Restarts: restarts(in.pod),
		}
		if in.pod.DeletionTimestamp != nil && in.pod.Status.Phase != corev1.PodSucceeded && in.pod.Status.Phase != corev1.PodFailed {
			r.Phase = "Terminating"
		}
		if in.finding != nil {
			r.Status.ReadinessIssue = &Issue{Reason: in.finding.name, Message: in.finding.message}
		}
		out = append(out, r)
	}
	notes := jobNotes(&s, all)
	if q := waitingFinding(&s); q != nil {
		// A queued job, or one whose submit never finished, has no pods yet: without this,
		// replicas would print nothing at all.
		notes = append(notes, q.Message)
	}
	return out, notes
}

func readyCount(pod *corev1.Pod) string {
	ready := 0
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Ready {
			ready++
		}
	}
	return fmt.Sprintf("%d/%d", ready, len(pod.Spec.Containers))
}

func restarts(pod *corev1.Pod) int32 {
	var n int32
	for _, cs := range pod.Status.ContainerStatuses {
		n += cs.RestartCount
	}
	return n
}

// live reports whether a pod still counts toward the job's progress.
func live(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// jobNotes are observations about the job as a whole.
func jobNotes(s *Snapshot, all []inspected) []string {
	var notes []string
	if s.Job != nil && jobstatus.Of(s.Job, s.Pods).Status.Terminal() {
		return nil
	}
	var running, pending []inspected
	for _, in := range all {
		if !live(in.pod) {
			continue
		}
		switch in.pod.Status.Phase {
		case corev1.PodRunning:
			running = append(running, in)
		case corev1.PodPending:
			pending = append(pending, in)
		}
	}
	if len(running) > 0 && len(pending) > 0 {
		var ranks []string
		for _, p := range pending {
			why := ""
			if p.finding != nil {
				why = " (" + p.finding.name + ")"
			}
			ranks = append(ranks, fmt.Sprintf("%d%s", p.rank, why))
		}
		note := fmt.Sprintf("partial start: %d of %d ranks running, %d pending (rank %s); the running ranks wait at the "+
			"rendezvous for their peers and make no progress until every rank starts", len(running),
			len(running)+len(pending), len(pending), strings.Join(ranks, ", "))
		notes = append(notes, note)
	}
	if e := latestJobEvent(s, "FailedCreate"); e != nil {
		notes = append(notes, "the job controller cannot create pods: "+e.Message)
	}
	return notes
}

func latestJobEvent(s *Snapshot, reason string) *corev1.Event {
	if s.Job == nil {
		return nil
	}
	var best *corev1.Event
	for i := range s.Events {
		e := &s.Events[i]
		if e.InvolvedObject.Kind != "Job" || e.Reason != reason {
			continue
		}
		if e.InvolvedObject.UID != "" && e.InvolvedObject.UID != s.Job.UID {
			continue
		}
		if e.InvolvedObject.UID == "" && e.InvolvedObject.Name != s.Job.Name {
			continue
		}
		if best == nil || eventTime(*e).After(eventTime(*best)) {
			best = e
		}
	}
	return best
}

// Analyze is the SDK's get_failure_analysis: what went wrong, where first, and what to do.
// The class and suggestion are those of the earliest finding, the likeliest root cause: when
// one rank dies, its peers usually fail after it with NCCL timeouts or SIGTERM.
func Analyze(s Snapshot) Analysis {
	st := jobstatus.Of(s.Job, s.Pods)
	if s.Job != nil {
		st = jobstatus.WithSubmit(st, s.Job, s.Now)
		st = jobstatus.WithWorkload(st, s.Job, s.Workload)
	}
	a := Analysis{Status: string(st.Status), Message: st.Message, JobFailureByNodeEvent: []NodeEvent{}, Notes: []string{}}
	if s.Job != nil {
		a.Job, a.Namespace = s.Job.Name, s.Job.Namespace
	}
	all := inspectAll(&s)
	if st.Status == jobstatus.Complete {
		// Nothing to diagnose; still say which pods were replaced after an eviction, and which
		// attempts the hang watchdog ended (the job recovered, the hang is worth knowing).
		for _, in := range all {
			switch {
			case in.finding == nil:
			case policyAction(s.Job, in.pod) == batchv1.PodFailurePolicyActionIgnore:
				a.Notes = append(a.Notes, ignoredNote(in, all))
			case in.finding.name == Hang:
				a.Notes = append(a.Notes, fmt.Sprintf("rank %d: pod %s: %s: %s; the job started again and completed", in.rank, in.pod.Name, Hang, in.finding.message))
			}
		}
		return a
	}
	var events []NodeEvent
	var ignored []string
	for _, in := range all {
		f := in.finding
		if f == nil {
			continue
		}
		if policyAction(s.Job, in.pod) == batchv1.PodFailurePolicyActionIgnore {
			// An evicted or preempted pod the policy ignores was replaced: not a failure, and
			// never the root cause of one.
			ignored = append(ignored, ignoredNote(in, all))
			continue
		}
		events = append(events, NodeEvent{
			NodeEventName: f.name, Node: in.pod.Spec.NodeName, Pod: in.pod.Name, Rank: in.rank,
			ExitCode: f.exitCode, Message: f.message, Time: timePtr(f.at), ErrClass: f.class, Suggestion: f.suggestion,
		})
	}
	sort.SliceStable(events, func(i, j int) bool { return before(events[i].Time, events[j].Time) })

	root := -1
	if len(events) > 0 {
		root = 0
	}
	rule := firedRule(s.Job)
	if rule != nil {
		a.FailedByRule = rule
		// The pod the policy fired on is the cause, even if a peer died a moment earlier.
		for i := range events {
			if events[i].Pod == rule.Pod {
				root = i
				break
			}
		}
	}
	if q := waitingFinding(&s); q != nil {
		// Nothing runs until Kueue admits the job (or ever, when its submit never finished):
		// that is the answer, whatever came before (pods of an earlier admission that Kueue
		// preempted, say).
		events = append([]NodeEvent{*q}, events...)
		root = 0
	}
	if c := failedCondition(s.Job); c != nil {
		a.JobFailure = jobstatus.ReasonMessage(c.Reason, c.Message)
		if c.Reason == batchv1.JobReasonDeadlineExceeded {
			// The deadline is the cause: the ranks it killed died of SIGTERM after it.
			events = append([]NodeEvent{{
				NodeEventName: "DeadlineExceeded", Rank: -1, Message: a.JobFailure, Time: timePtr(c.LastTransitionTime.Time),
				ErrClass: ErrInfra, Suggestion: "The Job ran longer than its activeDeadlineSeconds. Raise the deadline, " +
					"or shorten the run (fewer epochs, resume from a checkpoint).",
			}}, events...)
			root = 0
		}
	}
	gone := len(events) == 0 && st.Status == jobstatus.Error && s.Archive != nil
	if gone {
		// No pod tells why: the archived logs may, as the failing rank's last lines would.
		events, root = archivedEvents(s.Archive), 0
	}
	if len(events) > 0 {
		a.setFindings(events, root)
	} else if st.Status == jobstatus.Error {
		// Failed, yet no pod tells why (pods already gone, e.g. deleted by a TTL or by hand).
		class := ErrInfra
		if c := failedCondition(s.Job); c != nil && programReason(c.Reason, rule) {
			class = ErrProgram
		}
		a.ErrClass = &class
		a.Suggestion = "The Job failed but its pods are gone, so the cause cannot be read from them. Resubmit and run " +
			"`kubectl tao diagnose` while the pods still exist."
	}
	if gone {
		a.Archive = evidence(s.Archive, false)
		a.Notes = append(a.Notes, archiveNote(a.Archive, len(events) > 0))
	}
	if rule != nil {
		a.Notes = append(a.Notes, policyNote(rule))
	}
	a.Notes = append(a.Notes, ignored...)
	a.Notes = append(a.Notes, jobNotes(&s, all)...)
	return a
}

// setFindings makes events the findings, events[root] the first failure whose class and
// suggestion are the job's.
func (a *Analysis) setFindings(events []NodeEvent, root int) {
	a.JobFailureByNodeEvent = events
	first := events[root]
	a.FirstFailure = &first
	class := first.ErrClass
	a.ErrClass = &class
	a.Suggestion = first.Suggestion
}

// programReason reports whether a Job failed for this reason is the program's fault when no pod
// is left to tell: it ran out of retries, or its policy failed it on an OOM or an exit code.
func programReason(reason string, rule *FiredRule) bool {
	switch reason {
	case batchv1.JobReasonBackoffLimitExceeded, batchv1.JobReasonMaxFailedIndexesExceeded, batchv1.JobReasonFailedIndexes:
		return true
	case batchv1.JobReasonPodFailurePolicy:
		return rule != nil && (rule.Kind == RuleKindOOM || rule.Kind == RuleKindProgram || rule.Kind == RuleKindStaging)
	}
	return false
}

func failedCondition(job *batchv1.Job) *batchv1.JobCondition {
	if job == nil {
		return nil
	}
	for i := range job.Status.Conditions {
		c := &job.Status.Conditions[i]
		if (c.Type == batchv1.JobFailed || c.Type == batchv1.JobFailureTarget) && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// before orders by time, unknown times last.
func before(a, b *time.Time) bool {
	switch {
	case a == nil:
		return false
	case b == nil:
		return true
	}
	return a.Before(*b)
}

// NeedsNode reports whether a pod's node must be read to explain it: a pod that is not
// progressing normally on a node (running but not ready, stuck terminating, evicted or in an
// unknown state). Collect asks for nothing else, so a healthy job costs no node reads.
func NeedsNode(pod *corev1.Pod) bool {
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodSucceeded {
		return false
	}
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodUnknown {
		return true
	}
	if pod.Status.Phase == corev1.PodFailed {
		return pod.Status.Reason == "Evicted" || hasDisruption(pod, "TerminationByKubelet")
	}
	c := podCondition(pod, corev1.PodReady)
	return pod.Status.Phase == corev1.PodRunning && c != nil && c.Status != corev1.ConditionTrue
}

func hasDisruption(pod *corev1.Pod, reason string) bool {
	c := podCondition(pod, corev1.DisruptionTarget)
	return c != nil && c.Status == corev1.ConditionTrue && c.Reason == reason
}

// NeedsLogs picks the pod whose last log lines may explain the failure: the earliest to exit
// non-zero for a reason other than OOM or an outside disruption. "" means none.
func NeedsLogs(pods []corev1.Pod) string {
	name := ""
	var at time.Time
	for i := range pods {
		pod := &pods[i]
		if pod.Status.Phase != corev1.PodFailed || pod.Status.Reason != "" || podCondition(pod, corev1.DisruptionTarget) != nil {
			continue
		}
		t := (podView{pod: pod}).terminated()
		if t == nil || t.Reason == "OOMKilled" {
			continue
		}
		if name == "" || t.FinishedAt.Time.Before(at) {
			name, at = pod.Name, t.FinishedAt.Time
		}
	}
	return name
}
