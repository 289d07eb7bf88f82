package jobstatus

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func job(nodes int32, mutate ...func(*batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{Spec: batchv1.JobSpec{Completions: ptr.To(nodes), Parallelism: ptr.To(nodes)}}
	for _, m := range mutate {
		m(j)
	}
	return j
}

func cond(t batchv1.JobConditionType, status corev1.ConditionStatus, reason, msg string) func(*batchv1.Job) {
	return func(j *batchv1.Job) {
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: t, Status: status, Reason: reason, Message: msg})
	}
}

func suspend(b bool) func(*batchv1.Job) { return func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(b) } }

func queued(q string) func(*batchv1.Job) {
	return func(j *batchv1.Job) { j.Labels = map[string]string{QueueLabel: q} }
}

func deleting(j *batchv1.Job) { j.DeletionTimestamp = &metav1.Time{} }

func pod(phase corev1.PodPhase) corev1.Pod { return corev1.Pod{Status: corev1.PodStatus{Phase: phase}} }

func TestOf(t *testing.T) {
	terminating := pod(corev1.PodRunning)
	terminating.DeletionTimestamp = &metav1.Time{}
	tests := []struct {
		name     string
		job      *batchv1.Job
		pods     []corev1.Pod
		want     Status
		wantMsg  string
		terminal bool
	}{
		{"missing", nil, nil, Unknown, "does not exist", false},
		{"new, no pods", job(2), []corev1.Pod{}, Pending, "0/2 ranks running", false},
		{"pods pending", job(2), []corev1.Pod{pod(corev1.PodPending), pod(corev1.PodPending)}, Pending, "0/2", false},
		{"partial start", job(2), []corev1.Pod{pod(corev1.PodRunning), pod(corev1.PodPending)}, Running, "1/2 ranks running", false},
		{"all running", job(2), []corev1.Pod{pod(corev1.PodRunning), pod(corev1.PodRunning)}, Running, "2/2", false},
		{"terminating pod is not running", job(1), []corev1.Pod{terminating}, Pending, "0/1", false},
		{"ready counter without pods", job(4, func(j *batchv1.Job) { j.Status.Ready = ptr.To[int32](3); j.Status.Active = 4 }), nil, Running, "3/4", false},
		{"active counter without ready", job(4, func(j *batchv1.Job) { j.Status.Active = 4 }), nil, Running, "4/4", false},
		{"suspended", job(1, suspend(true), cond(batchv1.JobSuspended, corev1.ConditionTrue, "JobSuspended", "Job suspended")), nil, Pending, "suspended: JobSuspended", false},
		{"resuming, condition not yet updated", job(2, suspend(false), cond(batchv1.JobSuspended, corev1.ConditionTrue, "JobSuspended", "Job suspended")), nil, Pending, "0/2 ranks running", false},
		{"resumed", job(1, cond(batchv1.JobSuspended, corev1.ConditionFalse, "JobResumed", "")), []corev1.Pod{}, Pending, "0/1", false},
		{"queued, not admitted yet", job(2, suspend(true), queued("team-a")), []corev1.Pod{}, Pending, "queued in team-a", false},
		{"queued, Suspended condition set", job(2, suspend(true), queued("team-a"), cond(batchv1.JobSuspended, corev1.ConditionTrue, "JobSuspended", "")), nil, Pending, "queued in team-a", false},
		{"admitted by Kueue, pods starting", job(2, suspend(false), queued("team-a")), []corev1.Pod{pod(corev1.PodPending)}, Pending, "0/2 ranks running", false},
		{"admitted by Kueue, running", job(2, suspend(false), queued("team-a")), []corev1.Pod{pod(corev1.PodRunning), pod(corev1.PodRunning)}, Running, "2/2", false},
		{"requeued after preemption (suspended again)", job(2, suspend(true), queued("team-a")), nil, Pending, "queued in team-a", false},
		{"queued but failed stays Error", job(1, suspend(true), queued("team-a"), cond(batchv1.JobFailed, corev1.ConditionTrue, "DeadlineExceeded", "")), nil, Error, "DeadlineExceeded", true},
		{"queued but being deleted", job(1, suspend(true), queued("team-a"), deleting), nil, Canceled, "", true},
		{"label without suspend is not queued", job(1, queued("team-a")), []corev1.Pod{}, Pending, "0/1 ranks running", false},
		{"complete", job(2, cond(batchv1.JobComplete, corev1.ConditionTrue, "", ""), func(j *batchv1.Job) { j.Status.Succeeded = 2 }), nil, Complete, "2/2 ranks succeeded", true},
		{"success criteria met (1.31+, pods still terminating)", job(2, cond(batchv1.JobSuccessCriteriaMet, corev1.ConditionTrue, "CompletionsReached", "")), []corev1.Pod{pod(corev1.PodRunning)}, Complete, "", true},
		{"failed", job(1, cond(batchv1.JobFailed, corev1.ConditionTrue, "BackoffLimitExceeded", "Job has reached the specified backoff limit")), nil, Error, "BackoffLimitExceeded: Job has reached", true},
		{"failure target (1.31+)", job(2, cond(batchv1.JobFailureTarget, corev1.ConditionTrue, "BackoffLimitExceeded", "")), []corev1.Pod{pod(corev1.PodRunning)}, Error, "BackoffLimitExceeded", true},
		{"deadline", job(1, cond(batchv1.JobFailed, corev1.ConditionTrue, "DeadlineExceeded", "Job was active longer than specified deadline")), nil, Error, "DeadlineExceeded", true},
		{"false conditions do not count", job(1, cond(batchv1.JobFailed, corev1.ConditionFalse, "", ""), cond(batchv1.JobComplete, corev1.ConditionFalse, "", "")), []corev1.Pod{}, Pending, "", false},
		{"being deleted while running", job(2, deleting), []corev1.Pod{pod(corev1.PodRunning)}, Canceled, "being deleted", true},
		{"deleted after completing keeps its outcome", job(1, deleting, cond(batchv1.JobComplete, corev1.ConditionTrue, "", "")), nil, Complete, "", true},
		{"deleted after failing keeps its outcome", job(1, deleting, cond(batchv1.JobFailed, corev1.ConditionTrue, "BackoffLimitExceeded", "")), nil, Error, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Of(tc.job, tc.pods)
			if r.Status != tc.want || r.Status.Terminal() != tc.terminal {
				t.Fatalf("Of() = %+v (terminal %v), want %s (terminal %v)", r, r.Status.Terminal(), tc.want, tc.terminal)
			}
			if tc.wantMsg != "" && !strings.Contains(r.Message, tc.wantMsg) {
				t.Fatalf("message %q, want it to contain %q", r.Message, tc.wantMsg)
			}
		})
	}
}
