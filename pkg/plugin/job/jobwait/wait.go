package jobwait

import (
	"context"
	"fmt"
	"io"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/printer"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobsummary"
)

// Report says how Wait reports: the final status through Out (a line when nil or human), AGE
// from Clock, progress and the result on Streams.
type Report struct {
	Out     *printer.Flags
	Clock   clock.PassiveClock
	Streams genericiooptions.IOStreams
}

// Wait waits for t and reports like `kubectl tao wait`: progress on r.Streams.ErrOut, the final
// status on r.Streams.Out (a line, or the status object when r.Out is not human), and the exit
// code of the outcome as the error. submit --wait calls it after creating the Job.
func Wait(ctx context.Context, client kubernetes.Interface, t Target, o Options, r Report) error {
	out, err := Until(ctx, client, t, o, r.Streams.ErrOut)
	if err != nil {
		return err
	}
	if perr := printFinal(r.Streams.Out, t, out, r.Out, r.Clock); perr != nil {
		return perr
	}
	return Err(t.Name, out.Result)
}

func printFinal(w io.Writer, t Target, out Outcome, p *printer.Flags, clk clock.PassiveClock) error {
	if p == nil || p.Human() {
		_, err := fmt.Fprintf(w, "job.batch/%s %s\n", t.Name, out.Result.Status)
		return err
	}
	s := jobsummary.Summarize(t.Namespace, t.Name, out.Job, nil, nil, clk.Now())
	s.Status, s.Reason, s.Message = out.Result.Status, out.Result.Reason, out.Result.Message
	return jobsummary.Print(w, p, s, clk.Now())
}
