package util

import (
	"context"
	"fmt"
	"io"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/printer"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobwait"
)

// WaitReport says how WaitAndReport reports: the final status through Out (a line when nil or
// human), AGE from Clock, progress and the result on Streams.
type WaitReport struct {
	Out     *printer.Flags
	Clock   clock.PassiveClock
	Streams genericiooptions.IOStreams
}

// WaitAndReport waits for t and reports like `kubectl tao wait`: progress on r.Streams.ErrOut,
// the final status on r.Streams.Out (a line, or the status object when r.Out is not human), and
// the exit code of the outcome as the error. `wait` and `submit --wait` share it.
func WaitAndReport(ctx context.Context, client kubernetes.Interface, t jobwait.Target, o jobwait.Options, r WaitReport) error {
	out, err := jobwait.Until(ctx, client, t, o, r.Streams.ErrOut)
	if err != nil {
		return err
	}
	if perr := printWaitOutcome(r.Streams.Out, t, out, r.Out, r.Clock); perr != nil {
		return perr
	}
	return jobwait.Err(t.Name, out.Result)
}

func printWaitOutcome(w io.Writer, t jobwait.Target, out jobwait.Outcome, p *printer.Flags, clk clock.PassiveClock) error {
	if p == nil || p.Human() {
		_, err := fmt.Fprintf(w, "job.batch/%s %s\n", t.Name, out.Result.Status)
		return err
	}
	s := jobstatus.Summarize(t.Namespace, t.Name, out.Job, nil, nil, clk.Now())
	s.Status, s.Reason, s.Message = out.Result.Status, out.Result.Reason, out.Result.Message
	return PrintSummary(w, p, s, clk.Now())
}
