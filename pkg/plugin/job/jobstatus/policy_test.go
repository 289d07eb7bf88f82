package jobstatus

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// retries is the policy of `submit --retries`: ignore disruptions, fail on 137, and
// on 2/126/127 (kept literal here: jobspec's own tests check its policy against these).
func retries() *batchv1.PodFailurePolicy {
	exit := func(codes ...int32) *batchv1.PodFailurePolicyOnExitCodesRequirement {
		return &batchv1.PodFailurePolicyOnExitCodesRequirement{ContainerName: ptr.To("tao"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: codes}
	}
	return &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
		{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}},
		{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: exit(137)},
		{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: exit(2, 126, 127)},
	}}
}

func TestPolicyAction(t *testing.T) {
	tests := []struct {
		name string
		job  *batchv1.Job
		pod  corev1.Pod
		want batchv1.PodFailurePolicyAction
	}{
		{"evicted and SIGKILLed: the first rule ignores it before the OOM rule", fixture.Job("train").Nodes(1).PodFailurePolicy(retries()).Obj(), fixture.Pod("").Container(corev1.Container{Name: "tao"}).Exited(137, "", time.Time{}).Disrupted("TerminationByKubelet", "", time.Time{}).Val(), batchv1.PodFailurePolicyActionIgnore},
		{"OOM", fixture.Job("train").Nodes(1).PodFailurePolicy(retries()).Obj(), fixture.Pod("").Container(corev1.Container{Name: "tao"}).Exited(137, "", time.Time{}).Val(), batchv1.PodFailurePolicyActionFailJob},
		{"not found", fixture.Job("train").Nodes(1).PodFailurePolicy(retries()).Obj(), fixture.Pod("").Container(corev1.Container{Name: "tao"}).Exited(127, "", time.Time{}).Val(), batchv1.PodFailurePolicyActionFailJob},
		{"traceback counts", fixture.Job("train").Nodes(1).PodFailurePolicy(retries()).Obj(), fixture.Pod("").Container(corev1.Container{Name: "tao"}).Exited(1, "", time.Time{}).Val(), ""},
		{"another container's 137 is not the rule's", fixture.Job("train").Nodes(1).PodFailurePolicy(retries()).Obj(), func() corev1.Pod {
			p := fixture.Pod("").Container(corev1.Container{Name: "tao"}).Exited(137, "", time.Time{}).Val()
			p.Status.ContainerStatuses[0].Name = "sidecar"
			return p
		}(), ""},
		{"running pod", fixture.Job("train").Nodes(1).PodFailurePolicy(retries()).Obj(), fixture.Pod("").Phase(corev1.PodRunning).Val(), ""},
		{"no policy", fixture.Job("train").Nodes(1).Obj(), fixture.Pod("").Container(corev1.Container{Name: "tao"}).Exited(137, "", time.Time{}).Disrupted("TerminationByKubelet", "", time.Time{}).Val(), ""},
		{"NotIn", fixture.Job("train").Nodes(1).PodFailurePolicy(&batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionCount,
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpNotIn, Values: []int32{1}}}}}).Obj(), fixture.Pod("").Container(corev1.Container{Name: "tao"}).Exited(3, "", time.Time{}).Val(), batchv1.PodFailurePolicyActionCount},
	}
	for _, tc := range tests {
		if got := PolicyAction(tc.job, &tc.pod); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestOfSaysWhatWasReplaced(t *testing.T) {
	evicted := fixture.Pod("").Container(corev1.Container{Name: "tao"}).Exited(137, "", time.Time{}).Disrupted("TerminationByKubelet", "", time.Time{}).Val()
	tests := []struct {
		name    string
		job     *batchv1.Job
		pods    []corev1.Pod
		want    Status
		wantMsg string
	}{
		{"running after an eviction", fixture.Job("train").Nodes(2).PodFailurePolicy(retries()).Obj(), []corev1.Pod{fixture.Pod("").Phase(corev1.PodRunning).Val(), evicted, fixture.Pod("").Phase(corev1.PodRunning).Val()}, Running,
			"2/2 ranks running; 1 pod replaced after an eviction or preemption (not a failure)"},
		{"replacement not started yet", fixture.Job("train").Nodes(1).PodFailurePolicy(retries()).Obj(), []corev1.Pod{evicted, fixture.Pod("").Phase(corev1.PodPending).Val()}, Pending, "0/1 ranks running; 1 pod replaced"},
		{"complete after two", fixture.Job("train").Nodes(2).PodFailurePolicy(retries()).Condition(batchv1.JobComplete, "", "").Succeeded(2).Obj(),
			[]corev1.Pod{evicted, evicted, fixture.Pod("").Phase(corev1.PodSucceeded).Val(), fixture.Pod("").Phase(corev1.PodSucceeded).Val()}, Complete, "2/2 ranks succeeded; 2 pods replaced after evictions"},
		{"a counted failure is not called replaced", fixture.Job("train").Nodes(1).PodFailurePolicy(retries()).Obj(), []corev1.Pod{fixture.Pod("").Container(corev1.Container{Name: "tao"}).Exited(1, "", time.Time{}).Val(), fixture.Pod("").Phase(corev1.PodRunning).Val()}, Running, "1/1 ranks running"},
		{"without the policy an eviction is not replaced", fixture.Job("train").Nodes(1).Obj(), []corev1.Pod{evicted}, Pending, "0/1 ranks running"},
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
