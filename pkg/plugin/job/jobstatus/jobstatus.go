// Package jobstatus maps a Job (and, when known, its pods) to the SDK's six statuses, and sums a
// job up in the one-line Summary that `status` and `wait -o` print. It is pure so that every
// combination is a table test; status, list, wait, logs and cancel all share it.
package jobstatus

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
)

// Status is one of the SDK's job statuses.
type Status string

// The statuses, as the TAO SDK's get_job_status names them.
const (
	// Pending: the Job exists and is not terminal, and none of its pods is Running yet
	// (waiting to be scheduled, pulling images, suspended or queued).
	Pending Status = "Pending"
	// Running: not terminal, and at least one pod is Running, or some rank has already
	// succeeded (the Job is finishing, or a replaced rank is starting again).
	Running Status = "Running"
	// Complete: condition Complete or SuccessCriteriaMet is True.
	Complete Status = "Complete"
	// Error: condition Failed or FailureTarget is True.
	Error Status = "Error"
	// Canceled: the Job is being deleted before it reached Complete or Error.
	Canceled Status = "Canceled"
	// Unknown: the Job does not exist (or cannot be read).
	Unknown Status = "Unknown"
)

// Terminal reports whether s can no longer change (Unknown is not terminal: a Job may appear).
func (s Status) Terminal() bool {
	return s == Complete || s == Error || s == Canceled
}

// Result is a status with its explanation and the rank counts behind it.
type Result struct {
	Status Status
	// Reason says why, where Status alone does not (see Reason); "" when nothing to add.
	Reason  Reason
	Message string
	// Held says why nothing is admitted from a queued job's queue now (QueueState.Held: an
	// admin stopped it, or Kueue marks it inactive); "" when nothing holds it. The job stays
	// Queued, and Message says it too; a wait says it once per change.
	Held string
	// Position is a Queued or Preempted job's place in its queues, when Kueue's visibility
	// API told it (Workload.Position); nil otherwise.
	Position *Position
	// Nodes is the number of ranks the Job wants (spec.completions, or parallelism).
	Nodes int32
	// Running counts pods in phase Running, when pods were given; else the Job's ready count.
	Running int32
	// Range is an elastic job's MIN:MAX (--nodes MIN:MAX), "" for a job of fixed size.
	Range string
}

// Ranks is "RUNNING/NODES", with an elastic job's range after it: "2/3 (1:4)".
func (r Result) Ranks() string {
	if r.Range != "" {
		return fmt.Sprintf("%d/%d (%s)", r.Running, r.Nodes, r.Range)
	}
	return fmt.Sprintf("%d/%d", r.Running, r.Nodes)
}

// Of computes the status of job. pods are the Job's pods when the caller has them (nil is
// fine: the Job's own counters are used). A nil job is Unknown.
//
// Kubernetes 1.31+ first sets FailureTarget or SuccessCriteriaMet and only sets Failed or
// Complete once every pod is gone; the first pair already decides the outcome, so it counts as
// terminal here (a pod stuck terminating on a lost node must not keep `wait` hanging).
func Of(job *batchv1.Job, pods []corev1.Pod) Result {
	if job == nil {
		return Result{Status: Unknown, Message: "the Job does not exist"}
	}
	r := Result{Nodes: wanted(job), Running: job.Status.Active}
	if minN, maxN, ok := jobspec.NodesRange(job); ok {
		r.Range = jobspec.FormatNodesRange(minN, maxN)
	}
	elastic := ""
	if r.Range != "" {
		elastic = " (elastic " + r.Range + ")"
	}
	if pods != nil {
		r.Running = 0
		for i := range pods {
			if pods[i].Status.Phase == corev1.PodRunning && pods[i].DeletionTimestamp == nil {
				r.Running++
			}
		}
	} else if job.Status.Ready != nil {
		r.Running = *job.Status.Ready
	}

	if c := condition(job, batchv1.JobFailed, batchv1.JobFailureTarget); c != nil {
		r.Status, r.Message = Error, ReasonMessage(c.Reason, c.Message)
		return r
	}
	// Pods the Job's pod failure policy ignored were replaced: say so, since a Failed pod in
	// `kubectl get pods` otherwise looks like a failure.
	replaced := ""
	if n := ignoredFailures(job, pods); n > 0 {
		replaced = replacedNote(n)
	}
	if c := condition(job, batchv1.JobComplete, batchv1.JobSuccessCriteriaMet); c != nil {
		// SuccessCriteriaMet (1.31+) may come before the Job's count has the last successes.
		n := succeeded(job, nil)
		if pods != nil {
			n = max(n, succeeded(job, pods))
		}
		r.Status, r.Message = Complete, fmt.Sprintf("%d/%d ranks succeeded", n, r.Nodes)+replaced
		return r
	}
	if job.DeletionTimestamp != nil {
		r.Status, r.Message = Canceled, "the Job is being deleted"
		return r
	}
	// A suspended Job labelled for a Kueue LocalQueue waits for Kueue to admit it (by resuming
	// it), whatever its Suspended condition says yet.
	if q := job.Labels[QueueLabel]; q != "" && job.Spec.Suspend != nil && *job.Spec.Suspend {
		r.Status, r.Message = Pending, "queued in "+q
		return r
	}
	// A Job just resumed (submit creates it suspended) keeps a True Suspended condition until
	// the controller catches up; spec.suspend is what counts.
	if c := condition(job, batchv1.JobSuspended); c != nil && job.Spec.Suspend != nil && *job.Spec.Suspend {
		r.Status, r.Message = Pending, "suspended: "+ReasonMessage(c.Reason, c.Message)
		return r
	}
	if r.Running > 0 {
		r.Status, r.Message = Running, fmt.Sprintf("%d/%d ranks running", r.Running, r.Nodes)+elastic+replaced
		return r
	}
	// Between the last pod's success and the Job's Complete no rank runs; a server without
	// SuccessCriteriaMet (before 1.31) leaves that gap open for a while. The job is not
	// Pending again: a wait must not read Running -> Pending -> Complete.
	if n := succeeded(job, pods); n > 0 {
		r.Status, r.Message = Running, fmt.Sprintf("0/%d ranks running, %d succeeded", r.Nodes, n)+replaced
		return r
	}
	r.Status, r.Message = Pending, fmt.Sprintf("0/%d ranks running", r.Nodes)+elastic+replaced
	return r
}

// succeeded counts the ranks that have succeeded: the pods in phase Succeeded when given, else
// the Job's count and the successes its controller has yet to count.
func succeeded(job *batchv1.Job, pods []corev1.Pod) int32 {
	if pods != nil {
		var n int32
		for i := range pods {
			if pods[i].Status.Phase == corev1.PodSucceeded {
				n++
			}
		}
		return n
	}
	n := job.Status.Succeeded
	if u := job.Status.UncountedTerminatedPods; u != nil {
		n += int32(len(u.Succeeded))
	}
	return n
}

func wanted(job *batchv1.Job) int32 {
	if job.Spec.Completions != nil {
		return *job.Spec.Completions
	}
	if job.Spec.Parallelism != nil {
		return *job.Spec.Parallelism
	}
	return 1
}

func condition(job *batchv1.Job, types ...batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range job.Status.Conditions {
		c := &job.Status.Conditions[i]
		if c.Status != corev1.ConditionTrue {
			continue
		}
		for _, t := range types {
			if c.Type == t {
				return c
			}
		}
	}
	return nil
}

// ReasonMessage is how a condition (a Job's or a pod's), or any reason with its detail, reads
// to a user: "reason: message", or whichever of the two is set.
func ReasonMessage(reason, message string) string {
	switch {
	case reason != "" && message != "":
		return reason + ": " + message
	case reason != "":
		return reason
	}
	return message
}
