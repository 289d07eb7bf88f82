package jobwait

import (
	"testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

func TestTransition(t *testing.T) {
	pending := jobstatus.Result{Status: jobstatus.Pending, Message: "0/2 ranks running", Nodes: 2}
	suspended := jobstatus.Result{Status: jobstatus.Pending, Message: "suspended: JobSuspended", Nodes: 2}
	run1 := jobstatus.Result{Status: jobstatus.Running, Message: "1/2 ranks running", Nodes: 2, Running: 1}
	run2 := jobstatus.Result{Status: jobstatus.Running, Message: "2/2 ranks running", Nodes: 2, Running: 2}
	done := jobstatus.Result{Status: jobstatus.Complete, Message: "2/2 ranks succeeded", Nodes: 2}
	failed := jobstatus.Result{Status: jobstatus.Error, Message: "BackoffLimitExceeded", Nodes: 2}
	tests := []struct {
		name string
		prev *jobstatus.Result
		cur  jobstatus.Result
		want string
	}{
		{"first sight, pending", nil, pending, "Pending (0/2 ranks)"},
		{"first sight, suspended", nil, suspended, "Pending (suspended: JobSuspended)"},
		{"first sight, finished", nil, done, "Complete (2/2 ranks succeeded)"},
		{"starts", &pending, run2, "Pending -> Running (2/2 ranks)"},
		{"resumed", &suspended, pending, "Pending (0/2 ranks)"},
		{"more ranks up", &run1, run2, "Running (1/2 -> 2/2 ranks)"},
		{"a rank goes down", &run2, run1, "Running (2/2 -> 1/2 ranks)"},
		{"no change", &run2, run2, ""},
		{"pending stays pending", &pending, pending, ""},
		{"completes", &run2, done, "Running -> Complete (2/2 ranks succeeded)"},
		{"fails", &run1, failed, "Running -> Error (BackoffLimitExceeded)"},
		{"unknown status without message", &run1, jobstatus.Result{Status: jobstatus.Unknown}, "Running -> Unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Transition(tc.prev, tc.cur); got != tc.want {
				t.Errorf("Transition = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestErrCodes(t *testing.T) {
	for s, want := range map[jobstatus.Status]exitcode.Code{
		jobstatus.Complete: exitcode.OK, jobstatus.Error: exitcode.JobFailed, jobstatus.Canceled: exitcode.JobCanceled,
		jobstatus.Running: exitcode.Error, jobstatus.Unknown: exitcode.Error,
	} {
		if got := exitcode.Of(Err("j", jobstatus.Result{Status: s})); got != want {
			t.Errorf("Err(%s) exit %d, want %d", s, got, want)
		}
	}
}

func TestErrMessages(t *testing.T) {
	tests := []struct {
		r    jobstatus.Result
		want string
	}{
		{jobstatus.Result{Status: jobstatus.Error, Message: "BackoffLimitExceeded"}, "job.batch/j failed: BackoffLimitExceeded"},
		{jobstatus.Result{Status: jobstatus.Error}, "job.batch/j failed"},
		{jobstatus.Result{Status: jobstatus.Canceled, Message: "the Job was deleted"}, "job.batch/j was canceled: the Job was deleted"},
		{jobstatus.Result{Status: jobstatus.Canceled}, "job.batch/j was canceled"},
		{jobstatus.Result{Status: jobstatus.Running}, "job.batch/j is Running"},
	}
	for _, tc := range tests {
		if got := Err("j", tc.r); got == nil || got.Error() != tc.want {
			t.Errorf("Err(%+v) = %v, want %q", tc.r, got, tc.want)
		}
	}
}
