package jobstatus

import (
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

func TestExpired(t *testing.T) {
	val := func(w *fixture.JobWrapper) batchv1.Job { return *w.Obj() }
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	ours := func(name string) *fixture.JobWrapper {
		return fixture.Job(name).Namespace("ml").Label(jobspec.ManagedByLabel, jobspec.ManagedByValue)
	}
	incomplete := func(name string, age time.Duration) batchv1.Job {
		return val(ours(name).Annotation(jobspec.SubmittingAnnotation, "true").Suspend(true).Created(now.Add(-age)))
	}
	// A failed Job without completionTime: the Failed condition's time is when it finished.
	failedNoCompletion := val(ours("failed-cond").Finished(batchv1.JobFailed, now.Add(-30*time.Hour)))
	failedNoCompletion.Status.CompletionTime = nil
	tests := []struct {
		name string
		jobs []batchv1.Job
		want []string
	}{
		{"none", nil, []string{}},
		{"oldest first", []batchv1.Job{
			val(ours("b").Finished(batchv1.JobComplete, now.Add(-25*time.Hour))),
			val(ours("a").Finished(batchv1.JobComplete, now.Add(-48*time.Hour))),
		}, []string{"a", "b"}},
		{"recent kept", []batchv1.Job{val(ours("recent").Finished(batchv1.JobComplete, now.Add(-time.Hour)))}, []string{}},
		{"exactly the age kept", []batchv1.Job{val(ours("edge").Finished(batchv1.JobComplete, now.Add(-24*time.Hour)))}, []string{}},
		{"running never", []batchv1.Job{val(ours("running").Created(now.Add(-100 * time.Hour)))}, []string{}},
		{"failed by its condition", []batchv1.Job{failedNoCompletion}, []string{"failed-cond"}},
		{"being deleted left out", []batchv1.Job{val(ours("going").Finished(batchv1.JobComplete, now.Add(-48*time.Hour)).Deleting(now))}, []string{}},
		{"incomplete submit by its age", []batchv1.Job{incomplete("old-inc", 40*time.Hour), incomplete("new-inc", time.Hour)}, []string{"old-inc"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := []string{}
			for _, j := range Expired(tc.jobs, now, 24*time.Hour) {
				got = append(got, j.Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Expired = %v, want %v", got, tc.want)
			}
		})
	}
}
