package jobstatus

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

func TestOf(t *testing.T) {
	terminating := fixture.Pod("").Phase(corev1.PodRunning).Deleting(time.Time{}).Val()
	tests := []struct {
		name     string
		job      *batchv1.Job
		pods     []corev1.Pod
		want     Status
		wantMsg  string
		terminal bool
	}{
		{"missing", nil, nil, Unknown, "does not exist", false},
		{"new, no pods", fixture.Job("train").Nodes(2).Obj(), []corev1.Pod{}, Pending, "0/2 ranks running", false},
		{"pods pending", fixture.Job("train").Nodes(2).Obj(), []corev1.Pod{fixture.Pod("").Phase(corev1.PodPending).Val(), fixture.Pod("").Phase(corev1.PodPending).Val()}, Pending, "0/2", false},
		{"partial start", fixture.Job("train").Nodes(2).Obj(), []corev1.Pod{fixture.Pod("").Phase(corev1.PodRunning).Val(), fixture.Pod("").Phase(corev1.PodPending).Val()}, Running, "1/2 ranks running", false},
		{"all running", fixture.Job("train").Nodes(2).Obj(), []corev1.Pod{fixture.Pod("").Phase(corev1.PodRunning).Val(), fixture.Pod("").Phase(corev1.PodRunning).Val()}, Running, "2/2", false},
		{"terminating pod is not running", fixture.Job("train").Nodes(1).Obj(), []corev1.Pod{terminating}, Pending, "0/1", false},
		{"ready counter without pods", fixture.Job("train").Nodes(4).Active(4).Ready(3).Obj(), nil, Running, "3/4", false},
		{"active counter without ready", fixture.Job("train").Nodes(4).Active(4).Obj(), nil, Running, "4/4", false},
		{"suspended", fixture.Job("train").Nodes(1).Suspend(true).Condition(batchv1.JobSuspended, "JobSuspended", "Job suspended").Obj(), nil, Pending, "suspended: JobSuspended", false},
		{"resuming, condition not yet updated", fixture.Job("train").Nodes(2).Suspend(false).Condition(batchv1.JobSuspended, "JobSuspended", "Job suspended").Obj(), nil, Pending, "0/2 ranks running", false},
		{"resumed", fixture.Job("train").Nodes(1).Conditions(batchv1.JobCondition{Type: batchv1.JobSuspended, Status: corev1.ConditionFalse, Reason: "JobResumed"}).Obj(), []corev1.Pod{}, Pending, "0/1", false},
		{"queued, not admitted yet", fixture.Job("train").Nodes(2).Suspend(true).Label(QueueLabel, "team-a").Obj(), []corev1.Pod{}, Pending, "queued in team-a", false},
		{"queued, Suspended condition set", fixture.Job("train").Nodes(2).Suspend(true).Label(QueueLabel, "team-a").Condition(batchv1.JobSuspended, "JobSuspended", "").Obj(), nil, Pending, "queued in team-a", false},
		{"admitted by Kueue, pods starting", fixture.Job("train").Nodes(2).Suspend(false).Label(QueueLabel, "team-a").Obj(), []corev1.Pod{fixture.Pod("").Phase(corev1.PodPending).Val()}, Pending, "0/2 ranks running", false},
		{"admitted by Kueue, running", fixture.Job("train").Nodes(2).Suspend(false).Label(QueueLabel, "team-a").Obj(), []corev1.Pod{fixture.Pod("").Phase(corev1.PodRunning).Val(), fixture.Pod("").Phase(corev1.PodRunning).Val()}, Running, "2/2", false},
		{"requeued after preemption (suspended again)", fixture.Job("train").Nodes(2).Suspend(true).Label(QueueLabel, "team-a").Obj(), nil, Pending, "queued in team-a", false},
		{"queued but failed stays Error", fixture.Job("train").Nodes(1).Suspend(true).Label(QueueLabel, "team-a").Condition(batchv1.JobFailed, "DeadlineExceeded", "").Obj(), nil, Error, "DeadlineExceeded", true},
		{"queued but being deleted", fixture.Job("train").Nodes(1).Suspend(true).Label(QueueLabel, "team-a").Deleting(time.Time{}).Obj(), nil, Canceled, "", true},
		{"label without suspend is not queued", fixture.Job("train").Nodes(1).Label(QueueLabel, "team-a").Obj(), []corev1.Pod{}, Pending, "0/1 ranks running", false},
		{"complete", fixture.Job("train").Nodes(2).Condition(batchv1.JobComplete, "", "").Succeeded(2).Obj(), nil, Complete, "2/2 ranks succeeded", true},
		// Before 1.31 no SuccessCriteriaMet: every pod has succeeded and the Job is not Complete yet.
		{"finishing, pods succeeded", fixture.Job("train").Nodes(2).Obj(), []corev1.Pod{fixture.Pod("").Phase(corev1.PodSucceeded).Val(), fixture.Pod("").Phase(corev1.PodSucceeded).Val()}, Running, "0/2 ranks running, 2 succeeded", false},
		{"finishing, successes not counted yet", func() *batchv1.Job {
			j := fixture.Job("train").Nodes(2).Obj()
			j.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Succeeded: []types.UID{"a", "b"}}
			return j
		}(), nil, Running, "0/2 ranks running, 2 succeeded", false},
		{"one rank done, the other's replacement pending", fixture.Job("train").Nodes(2).Succeeded(1).Obj(), nil, Running, "0/2 ranks running, 1 succeeded", false},
		{"success criteria met (1.31+, pods still terminating)", fixture.Job("train").Nodes(2).Condition(batchv1.JobSuccessCriteriaMet, "CompletionsReached", "").Obj(), []corev1.Pod{fixture.Pod("").Phase(corev1.PodRunning).Val()}, Complete, "", true},
		{"success criteria met, the success not counted yet", func() *batchv1.Job {
			j := fixture.Job("train").Nodes(1).Condition(batchv1.JobSuccessCriteriaMet, "CompletionsReached", "").Obj()
			j.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Succeeded: []types.UID{"a"}}
			return j
		}(), nil, Complete, "1/1 ranks succeeded", true},
		{"success criteria met, the pod seen", fixture.Job("train").Nodes(1).Condition(batchv1.JobSuccessCriteriaMet, "CompletionsReached", "").Obj(),
			[]corev1.Pod{fixture.Pod("").Phase(corev1.PodSucceeded).Val()}, Complete, "1/1 ranks succeeded", true},
		{"failed", fixture.Job("train").Nodes(1).Condition(batchv1.JobFailed, "BackoffLimitExceeded", "Job has reached the specified backoff limit").Obj(), nil, Error, "BackoffLimitExceeded: Job has reached", true},
		{"failure target (1.31+)", fixture.Job("train").Nodes(2).Condition(batchv1.JobFailureTarget, "BackoffLimitExceeded", "").Obj(), []corev1.Pod{fixture.Pod("").Phase(corev1.PodRunning).Val()}, Error, "BackoffLimitExceeded", true},
		{"deadline", fixture.Job("train").Nodes(1).Condition(batchv1.JobFailed, "DeadlineExceeded", "Job was active longer than specified deadline").Obj(), nil, Error, "DeadlineExceeded", true},
		{"false conditions do not count", fixture.Job("train").Nodes(1).Conditions(batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionFalse}).Conditions(batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionFalse}).Obj(), []corev1.Pod{}, Pending, "", false},
		{"being deleted while running", fixture.Job("train").Nodes(2).Deleting(time.Time{}).Obj(), []corev1.Pod{fixture.Pod("").Phase(corev1.PodRunning).Val()}, Canceled, "being deleted", true},
		{"deleted after completing keeps its outcome", fixture.Job("train").Nodes(1).Deleting(time.Time{}).Condition(batchv1.JobComplete, "", "").Obj(), nil, Complete, "", true},
		{"deleted after failing keeps its outcome", fixture.Job("train").Nodes(1).Deleting(time.Time{}).Condition(batchv1.JobFailed, "BackoffLimitExceeded", "").Obj(), nil, Error, "", true},
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

func TestElasticJobShowsItsRange(t *testing.T) {
	job := fixture.Job("ddp").Nodes(3).Annotation(jobspec.NodesRangeAnnotation, "1:4").Obj()
	pods := []corev1.Pod{fixture.Pod("").Phase(corev1.PodRunning).Val(), fixture.Pod("").Phase(corev1.PodRunning).Val(), fixture.Pod("").Phase(corev1.PodPending).Val()}
	r := Of(job, pods)
	if r.Status != Running || r.Message != "2/3 ranks running (elastic 1:4)" || r.Ranks() != "2/3 (1:4)" {
		t.Errorf("elastic: %+v, ranks %q", r, r.Ranks())
	}
	if s := Summarize("ml", "ddp", job, pods, nil, time.Time{}); s.NodesRange == nil || *s.NodesRange != "1:4" || s.Nodes != 3 {
		t.Errorf("summary: nodes %d, range %v", s.Nodes, s.NodesRange)
	}
	fixed := Of(fixture.Job("train").Nodes(2).Obj(), pods[:2])
	if fixed.Range != "" || fixed.Ranks() != "2/2" || fixed.Message != "2/2 ranks running" {
		t.Errorf("fixed size: %+v", fixed)
	}
}
