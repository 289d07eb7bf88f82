package jobwait

import (
	"fmt"
	"strings"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// Describe is how a status reads in progress lines: the rank count for Pending and Running (with
// the reason in place of the status where there is one: "Queued (0/2 ranks)"), the explanation
// for the rest.
func Describe(r jobstatus.Result) string {
	switch {
	case r.Status == jobstatus.Running, r.Status == jobstatus.Pending && !strings.HasPrefix(r.Message, "suspended"):
		return fmt.Sprintf("%s (%d/%d ranks)", r.Shown(), r.Running, r.Nodes)
	case r.Message != "":
		return fmt.Sprintf("%s (%s)", r.Status, r.Message)
	}
	return string(r.Status)
}

// Transition is the progress line for a change from prev to cur, or "" when nothing a user
// would see changed. prev is nil for the first observation.
//
//	Pending (0/2 ranks)
//	Pending -> Running (1/2 ranks)
//	Running (1/2 -> 2/2 ranks)
//	Running -> Complete (2/2 ranks succeeded)
func Transition(prev *jobstatus.Result, cur jobstatus.Result) string {
	switch {
	case prev == nil:
		return Describe(cur)
	case prev.Status != cur.Status:
		return fmt.Sprintf("%s -> %s", prev.Status, Describe(cur))
	case cur.Status == jobstatus.Running && (prev.Running != cur.Running || prev.Nodes != cur.Nodes):
		return fmt.Sprintf("%s (%d/%d -> %d/%d ranks)", cur.Status, prev.Running, prev.Nodes, cur.Running, cur.Nodes)
	case prev.Message != cur.Message && cur.Status != jobstatus.Running:
		return Describe(cur)
	}
	return ""
}

// Err is the error, and so the exit code, for a terminal outcome: nil for Complete, JobFailed
// for Error, JobCanceled for Canceled. It is the one mapping from outcome to exit code: wait,
// submit --wait, logs -f and submit --follow all end through it.
func Err(name string, r jobstatus.Result) error {
	msg := ""
	if r.Message != "" {
		msg = ": " + r.Message
	}
	switch r.Status {
	case jobstatus.Complete:
		return nil
	case jobstatus.Error:
		return exitcode.WithCode(exitcode.JobFailed, fmt.Errorf("job.batch/%s failed%s", name, msg))
	case jobstatus.Canceled:
		return exitcode.WithCode(exitcode.JobCanceled, fmt.Errorf("job.batch/%s was canceled%s", name, msg))
	}
	return fmt.Errorf("job.batch/%s is %s%s", name, r.Status, msg)
}
