package jobstatus

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// retries gives the Job the policy of `submit --retries`: ignore disruptions, fail on 137, and
// on 2/126/127 (kept literal here: jobspec's own tests check its policy against these).
func retries(j *batchv1.Job) {
	exit := func(codes ...int32) *batchv1.PodFailurePolicyOnExitCodesRequirement {
		return &batchv1.PodFailurePolicyOnExitCodesRequirement{ContainerName: ptr.To("tao"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: codes}
	}
	j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
		{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}},
		{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: exit(137)},
		{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: exit(2, 126, 127)},
	}}
}

func failedPod(code int32, disrupted bool) corev1.Pod {
	p := pod(corev1.PodFailed)
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "tao", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}}
	if disrupted {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "TerminationByKubelet"}}
	}
	return p
}

func TestPolicyAction(t *testing.T) {
	tests := []struct {
		name string
		job  *batchv1.Job
		pod  corev1.Pod
		want batchv1.PodFailurePolicyAction
	}{
		{"evicted and SIGKILLed: the first rule ignores it before the OOM rule", job(1, retries), failedPod(137, true), batchv1.PodFailurePolicyActionIgnore},
		{"OOM", job(1, retries), failedPod(137, false), batchv1.PodFailurePolicyActionFailJob},
		{"not found", job(1, retries), failedPod(127, false), batchv1.PodFailurePolicyActionFailJob},
		{"traceback counts", job(1, retries), failedPod(1, false), ""},
		{"another container's 137 is not the rule's", job(1, retries), func() corev1.Pod {
			p := failedPod(137, false)
			p.Status.ContainerStatuses[0].Name = "sidecar"
			return p
		}(), ""},
		{"running pod", job(1, retries), pod(corev1.PodRunning), ""},
		{"no policy", job(1), failedPod(137, true), ""},
		{"NotIn", job(1, func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionCount,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpNotIn, Values: []int32{1}}}}}
		}), failedPod(3, false), batchv1.PodFailurePolicyActionCount},
	}
	for _, tc := range tests {
		if got := PolicyAction(tc.job, &tc.pod); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestOfSaysWhatWasReplaced(t *testing.T) {
	evicted := failedPod(137, true)
	tests := []struct {
		name    string
		job     *batchv1.Job
		pods    []corev1.Pod
		want    Status
		wantMsg string
	}{
		{"running after an eviction", job(2, retries), []corev1.Pod{pod(corev1.PodRunning), evicted, pod(corev1.PodRunning)}, Running,
			"2/2 ranks running; 1 pod replaced after an eviction or preemption (not a failure)"},
		{"replacement not started yet", job(1, retries), []corev1.Pod{evicted, pod(corev1.PodPending)}, Pending, "0/1 ranks running; 1 pod replaced"},
		{"complete after two", job(2, retries, cond(batchv1.JobComplete, corev1.ConditionTrue, "", ""), func(j *batchv1.Job) { j.Status.Succeeded = 2 }),
			[]corev1.Pod{evicted, evicted, pod(corev1.PodSucceeded), pod(corev1.PodSucceeded)}, Complete, "2/2 ranks succeeded; 2 pods replaced after evictions"},
		{"a counted failure is not called replaced", job(1, retries), []corev1.Pod{failedPod(1, false), pod(corev1.PodRunning)}, Running, "1/1 ranks running"},
		{"without the policy an eviction is not replaced", job(1), []corev1.Pod{evicted}, Pending, "0/1 ranks running"},
	}
	for _, tc := range tests {
		r := Of(tc.job, tc.pods)
		if r.Status != tc.want || !strings.HasPrefix(r.Message, tc.wantMsg) {
			t.Errorf("%s: %s %q, want %s %q", tc.name, r.Status, r.Message, tc.want, tc.wantMsg)
		}
		if !strings.Contains(tc.wantMsg, "replaced") && strings.Contains(r.Message, "replaced") {
			t.Errorf("%s: %q mentions a replacement", tc.name, r.Message)
		}
	}
}
