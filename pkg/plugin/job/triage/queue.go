package triage

import (
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
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
// it. What its Workload says (s.Workload, read by the command: why it waits, and the quota it
// waits for) names the situation, as status does; Kueue's own words come from the Workload, or
// else from its scheduler's latest "Pending" event on it, which Collect reads anyway.
func queuedFinding(s *Snapshot) *NodeEvent {
	queue := queuedIn(s.Job)
	if queue == "" {
		return nil
	}
	job := s.Job
	r := jobstatus.WithWorkload(jobstatus.Result{Status: jobstatus.Pending}, job, s.Workload)
	at := job.CreationTimestamp.Time
	says := ""
	if s.Workload != nil && s.Workload.Pending != "" {
		says = s.Workload.Pending
	}
	if e := latestWorkloadEvent(s); e != nil {
		at = eventTime(*e)
		if says == "" {
			says = e.Message
		}
	}
	var q *jobstatus.QueueState
	if s.Workload != nil {
		q = s.Workload.Queue
	}
	look := fmt.Sprintf("See Kueue's view with `kubectl get workloads -n %s` and `kubectl describe localqueue %s -n %s`, "+
		"and every queue's quota with `kubectl tao capacity --queues`.", job.Namespace, queue, job.Namespace)
	f := &NodeEvent{NodeEventName: string(r.Reason), Rank: -1, Time: timePtr(at), ErrClass: ErrInfra}
	switch {
	case r.Reason == jobstatus.Inadmissible:
		f.Message = "no pods: Kueue can never admit it from " + queue + ": the job " + r.Message
		if says != "" {
			f.Message += "; Kueue says: " + says
		}
		f.Suggestion = fmt.Sprintf("Waiting will not help. Cancel it (`kubectl tao cancel %s -n %s`) and resubmit with fewer GPUs or "+
			"nodes, or to a LocalQueue whose ClusterQueue holds %d %s in one flavor. %s",
			job.Name, job.Namespace, jobstatus.GPUsPerNode(job)*int64(jobstatus.Nodes(job)), jobspec.GPUResourceOf(job), look)
	case r.Reason == jobstatus.Deactivated:
		f.Message = "no pods: Kueue deactivated it in " + queue + ": " + r.Message
		f.Suggestion = fmt.Sprintf("Kueue will not admit it again by itself (its Workload has spec.active false, e.g. after "+
			"waitForPodsReady's requeue limit: its ranks did not all become ready in time). Find out why its pods did not start "+
			"(`kubectl get events -n %s`), then cancel and resubmit, or ask the cluster admin to reactivate its Workload. %s",
			job.Namespace, look)
	case r.Held != "":
		// Queued or Preempted behind a stopped or inactive queue: no quota frees it, an admin does.
		f.Message = fmt.Sprintf("queued in %s, not admitted yet: %s", queue, r.Held)
		if r.Reason == jobstatus.Preempted {
			f.Message = fmt.Sprintf("preempted by Kueue and requeued in %s, not admitted again yet: %s", queue, r.Held)
		}
		if d := q.Describe(); d != "" {
			f.Message += "; " + d
		}
		if says != "" {
			f.Message += "; Kueue says: " + says
		}
		f.Suggestion = fmt.Sprintf("Nothing is admitted from LocalQueue %s until %s. Then Kueue admits the job in its turn and starts %s; "+
			"until then it waits (it is not refused: `kubectl tao wait` goes on). %s",
			queue, heldFixes(q, job.Namespace), jobstatus.Gang(jobstatus.Nodes(job)), look)
	default:
		// Queued or Preempted: it waits for quota, and starts whole when there is room.
		f.Message = fmt.Sprintf("queued in %s, not admitted yet: Kueue starts %s when the queue has room for the job",
			queue, jobstatus.Gang(jobstatus.Nodes(job)))
		if r.Reason == jobstatus.Preempted {
			f.Message = fmt.Sprintf("preempted by Kueue and requeued in %s, not admitted again yet: Kueue restarts %s "+
				"when the queue has room for the job", queue, jobstatus.Gang(jobstatus.Nodes(job)))
		}
		if d := q.Describe(); d != "" {
			f.Message += "; " + d
		}
		if says != "" {
			f.Message += "; Kueue says: " + says
		}
		f.Suggestion = fmt.Sprintf("The job waits for Kueue to admit it from LocalQueue %s (its ClusterQueue needs free quota for "+
			"every rank). %s%s If the queue does not exist, cancel with `kubectl tao cancel %s -n %s` and resubmit with an "+
			"existing --queue (`kubectl tao preflight --queue NAME` checks it).", queue, admitsWhen(q), look, job.Name, job.Namespace)
	}
	return f
}

// heldFixes says what would let a stopped or inactive queue admit again: each stopped queue
// resumed (the patch that does it), an inactive ClusterQueue fixed. Both are an admin's to do:
// ClusterQueues are cluster-scoped, and stopping a queue is the admin's decision.
func heldFixes(q *jobstatus.QueueState, ns string) string {
	var fixes []string
	for _, st := range q.Stopped {
		target := "clusterqueue " + st.Name
		if st.Kind == "LocalQueue" {
			target = fmt.Sprintf("localqueue %s -n %s", st.Name, ns)
		}
		fixes = append(fixes, fmt.Sprintf("an admin resumes %s %s (its spec.stopPolicy is %s): "+
			"`kubectl patch %s --type merge -p '{\"spec\":{\"stopPolicy\":\"None\"}}'`", st.Kind, st.Name, st.Policy, target))
	}
	if q.Inactive != nil {
		fixes = append(fixes, fmt.Sprintf("an admin fixes ClusterQueue %s, which Kueue marks inactive (%s; e.g. create the "+
			"ResourceFlavor or AdmissionCheck it names): `kubectl describe clusterqueue %s`", q.ClusterQueue,
			jobstatus.ReasonMessage(q.Inactive.Reason, q.Inactive.Message), q.ClusterQueue))
	}
	return strings.Join(fixes, ", and ")
}

// admitsWhen says what would admit a job waiting for quota: the fewest GPUs that must be freed
// in one of its ClusterQueue's flavors. "" when the quota is not known.
func admitsWhen(q *jobstatus.QueueState) string {
	if q == nil || len(q.Flavors) == 0 || q.GPUs <= 0 {
		return ""
	}
	best := jobstatus.FlavorQuota{}
	short := int64(-1)
	for _, f := range q.Flavors {
		if f.Nominal < q.GPUs {
			continue // only borrowing could hold it there: not something to wait for
		}
		if need := q.GPUs - f.Free(); short < 0 || need < short {
			best, short = f, need
		}
	}
	switch {
	case short < 0:
		return ""
	case short <= 0:
		return fmt.Sprintf("Flavor %s has room for it now (%d of %d used): Kueue admits it in its turn, behind the workloads ahead of it. ",
			best.Flavor, best.Used, best.Nominal)
	}
	return fmt.Sprintf("It is admitted once %d more %s are free in flavor %s (%d of %d used now), e.g. when admitted jobs end. ",
		short, best.GPU(), best.Flavor, best.Used, best.Nominal)
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
