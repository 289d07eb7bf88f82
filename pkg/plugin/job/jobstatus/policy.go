package jobstatus

import (
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// PolicyAction is what the Job's pod failure policy (kubectl tao submit --retries) does with a
// failed pod: the action of the first rule that matches, evaluated as the job controller does,
// or "" when none matches (the failure counts against the retries) or the Job has no policy.
func PolicyAction(job *batchv1.Job, pod *corev1.Pod) batchv1.PodFailurePolicyAction {
	if job == nil || job.Spec.PodFailurePolicy == nil || pod.Status.Phase != corev1.PodFailed {
		return ""
	}
	for _, rule := range job.Spec.PodFailurePolicy.Rules {
		if rule.OnExitCodes != nil && exitCodesMatch(rule.OnExitCodes, pod) {
			return rule.Action
		}
		for _, want := range rule.OnPodConditions {
			for _, c := range pod.Status.Conditions {
				if c.Type == want.Type && c.Status == want.Status {
					return rule.Action
				}
			}
		}
	}
	return ""
}

func exitCodesMatch(req *batchv1.PodFailurePolicyOnExitCodesRequirement, pod *corev1.Pod) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if req.ContainerName != nil && cs.Name != *req.ContainerName {
			continue
		}
		t := cs.State.Terminated
		if t == nil || t.ExitCode == 0 {
			continue
		}
		if slices.Contains(req.Values, t.ExitCode) == (req.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn) {
			return true
		}
	}
	return false
}

// ignoredFailures counts the failed pods the Job's policy ignored (evicted, preempted, lost):
// the Job replaced them, and they are not failures.
func ignoredFailures(job *batchv1.Job, pods []corev1.Pod) int {
	n := 0
	for i := range pods {
		if PolicyAction(job, &pods[i]) == batchv1.PodFailurePolicyActionIgnore {
			n++
		}
	}
	return n
}

func replacedNote(n int) string {
	if n == 1 {
		return "; 1 pod replaced after an eviction or preemption (not a failure)"
	}
	return fmt.Sprintf("; %d pods replaced after evictions or preemptions (not failures)", n)
}
