package jobstatus

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

func TestWithSubmit(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	old := created.Add(5 * time.Minute)
	left := func() *fixture.JobWrapper {
		return fixture.Job("train").Namespace("ml").Nodes(2).Created(created).Suspend(true).
			Label(jobspec.ManagedByLabel, jobspec.ManagedByValue).Annotation(jobspec.SubmittingAnnotation, "true")
	}
	noMarker := left().Obj()
	delete(noMarker.Annotations, jobspec.SubmittingAnnotation)
	notOurs := left().Obj()
	delete(notOurs.Labels, jobspec.ManagedByLabel)
	tests := []struct {
		name    string
		job     *batchv1.Job
		now     time.Time
		status  Status
		reason  Reason
		message string
	}{
		{"left by a killed submit", left().Obj(), old, Pending, IncompleteSubmit, "remove it with `kubectl tao delete train -n ml`"},
		{"says how long", left().Obj(), old, Pending, IncompleteSubmit, "created suspended 5m0s ago"},
		{"with a Suspended condition", left().Condition(batchv1.JobSuspended, "JobSuspended", "Job suspended").Obj(), old, Pending, IncompleteSubmit, "never finished"},
		{"just past the grace", left().Obj(), created.Add(SubmitGrace), Pending, IncompleteSubmit, "never finished"},
		{"submit still running", left().Obj(), created.Add(2 * time.Second), Pending, "", "being submitted"},
		{"client clock behind the server", left().Obj(), created.Add(-time.Minute), Pending, "", "being submitted"},
		{"suspended by hand: no marker", noMarker, old, Pending, "", "0/2 ranks running"},
		{"not made by kubectl-tao", notOurs, old, Pending, "", "0/2 ranks running"},
		{"started", left().Suspend(false).Obj(), old, Pending, "", "0/2 ranks running"},
		{"queued", left().Label(QueueLabel, "team-a").Obj(), old, Pending, "", "queued in team-a"},
		{"being deleted", left().Deleting(old).Obj(), old, Canceled, "", "being deleted"},
		{"failed", left().Condition(batchv1.JobFailed, "DeadlineExceeded", "").Obj(), old, Error, "", "DeadlineExceeded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := WithSubmit(Of(tc.job, nil), tc.job, tc.now)
			if r.Status != tc.status || r.Reason != tc.reason || !strings.Contains(r.Message, tc.message) {
				t.Errorf("got %s/%q %q, want %s/%q %q", r.Status, r.Reason, r.Message, tc.status, tc.reason, tc.message)
			}
		})
	}
}

func TestWithSubmitKeepsOtherReasons(t *testing.T) {
	r := Result{Status: Pending, Reason: Queued, Message: "queued in q"}
	job := fixture.Job("x").Suspend(true).Label(jobspec.ManagedByLabel, jobspec.ManagedByValue).Annotation(jobspec.SubmittingAnnotation, "true").Obj()
	if got := WithSubmit(r, job, time.Now()); got != r {
		t.Errorf("WithSubmit changed a result with a reason: %+v", got)
	}
	if SubmitUnfinished(nil) {
		t.Error("SubmitUnfinished(nil) = true")
	}
}
