package jobwait

import (
	"context"
	"fmt"
	"io"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/jobsummary"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/printer"
)

// Wait waits for t and reports like `kubectl tao wait`: progress on streams.ErrOut, the final
// status on streams.Out (a line, or the status object when p is not human), and the exit code
// of the outcome as the error. submit --wait calls it after creating the Job.
func Wait(ctx context.Context, client kubernetes.Interface, t Target, timeout time.Duration, p *printer.Flags, clk clock.PassiveClock, streams genericiooptions.IOStreams) error {
	out, err := Until(ctx, client, t, timeout, streams.ErrOut)
	if err != nil {
		return err
	}
	if perr := printFinal(streams.Out, t, out, p, clk); perr != nil {
		return perr
	}
	return Err(t.Name, out.Result)
}

func printFinal(w io.Writer, t Target, out Outcome, p *printer.Flags, clk clock.PassiveClock) error {
	if p == nil || p.Human() {
		_, err := fmt.Fprintf(w, "job.batch/%s %s\n", t.Name, out.Result.Status)
		return err
	}
	s := jobsummary.Summarize(t.Namespace, t.Name, out.Job, nil)
	s.Status, s.Message = out.Result.Status, out.Result.Message
	return jobsummary.Print(w, p, s, clk.Now())
}
