package triage

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
)

// leftJob is a Job a submit created (marked, suspended) and never started, created at t0.
func leftJob() *batchv1.Job {
	return jobOf("ddp", 2).Label(jobspec.ManagedByLabel, jobspec.ManagedByValue).
		Annotation(jobspec.SubmittingAnnotation, "true").Suspend(true).Obj()
}

func TestDiagnoseIncompleteSubmit(t *testing.T) {
	a := Analyze(Snapshot{Job: leftJob(), Now: now})
	if a.Status != "Pending" || !strings.Contains(a.Message, "never finished") {
		t.Errorf("status %s %q, want Pending and why", a.Status, a.Message)
	}
	f := a.FirstFailure
	if f == nil || f.NodeEventName != string(jobstatus.IncompleteSubmit) || f.Rank != -1 || a.ErrClass == nil || *a.ErrClass != ErrInfra {
		t.Fatalf("first failure %+v, class %v; want IncompleteSubmit at rank -1, ERR_INFRA", f, a.ErrClass)
	}
	if !strings.Contains(f.Message, "interrupted") || !strings.Contains(a.Suggestion, "`kubectl tao delete ddp -n ml`") {
		t.Errorf("message %q, suggestion %q: want what happened and the exact command", f.Message, a.Suggestion)
	}
	_, notes := Replicas(Snapshot{Job: leftJob(), Now: now})
	if len(notes) != 1 || !strings.HasPrefix(notes[0], "the submit that created this job never finished") {
		t.Errorf("replicas notes %q", notes)
	}

	// Inside the grace its submit may still be running: nothing to report yet.
	a = Analyze(Snapshot{Job: leftJob(), Now: t0.Add(time.Second)})
	if a.FirstFailure != nil || a.Suggestion != "" {
		t.Errorf("a submit still running diagnosed as %+v", a.FirstFailure)
	}
	// Suspended by hand (no mark): not an incomplete submit.
	byHand := leftJob()
	delete(byHand.Annotations, jobspec.SubmittingAnnotation)
	if a := Analyze(Snapshot{Job: byHand, Now: now}); a.FirstFailure != nil {
		t.Errorf("a Job suspended by hand diagnosed as %+v", a.FirstFailure)
	}
}
