// Package wait implements `kubectl tao wait` over the jobwait engine (which `submit --wait`
// shares): block until a Job reaches a terminal status, following it with a watch, and turn
// the outcome into an exit code.
package wait

import (
	"context"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/printer"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobwait"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/kueue"
)

const example = `  # Block until the job ends; the exit code tells how (0 Complete, 9 Error, 10 Canceled)
  kubectl tao wait train-1 && echo trained

  # Wait however long ranks take to start (no --stuck-timeout, exit code 12)
  kubectl tao wait train-1 --stuck-timeout 0

  # Give up after two hours (exit code 8)
  kubectl tao wait job/train-1 --timeout 2h

  # The final status as JSON
  kubectl tao wait train-1 -o json`

const long = `Wait until a training job reaches a terminal status: Complete, Error or Canceled. Each
change of status goes to stderr; stdout gets "job.batch/NAME STATUS", or the status object with
-o. There is no timeout by default: training runs for hours.

Exit codes: 0 Complete, 9 Error, 10 Canceled, 8 --timeout passed, 12 ranks could not start for
--stuck-timeout, 13 Kueue will never admit the job, 3 no such Job.

Guide: https://github.com/kubectl-tao/kubectl-tao/blob/main/docs/watching.md#status-list-wait`

// Options are the flags and arguments of `kubectl tao wait`.
type Options struct {
	Timeout      time.Duration
	StuckTimeout time.Duration

	namespace, name string
	out             *printer.Flags

	factory cmdutil.Factory
	clock   clock.PassiveClock
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao wait`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, clk clock.PassiveClock) *cobra.Command {
	o := &Options{out: printer.NewFlags(printer.WithNames()), factory: f, clock: clk, IOStreams: streams}
	cmd := &cobra.Command{
		Use:                   "wait JOB [--timeout DURATION] [-o FORMAT]",
		DisableFlagsInUseLine: true,
		Short:                 "Wait for a training job to finish",
		Long:                  long,
		Example:               example,
		Args:                  cmdutil.ExactlyOneJob,
		RunE:                  cmdutil.RunE(o),
	}
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 0, "How long to wait before giving up (exit code 8), e.g. 30m or 2h; 0 waits forever.")
	jobwait.AddStuckTimeoutFlag(cmd.Flags(), &o.StuckTimeout)
	o.out.AddFlags(cmd.Flags(), `the line "job.batch/NAME STATUS"`)
	cmd.ValidArgsFunction = cmdutil.CompleteJobNames(f)
	return cmd
}

// Complete resolves the Job reference and the namespace.
func (o *Options) Complete(_ *cobra.Command, args []string) error {
	var err error
	o.namespace, o.name, err = cmdutil.CompleteJob(o.factory, args)
	return err
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if err := cmdutil.ValidateTimeout(o.Timeout); err != nil {
		return err
	}
	if err := jobwait.ValidateStuckTimeout(o.StuckTimeout); err != nil {
		return err
	}
	return o.out.Validate()
}

// Run waits and reports.
func (o *Options) Run(ctx context.Context) error {
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return err
	}
	target := jobwait.Target{Namespace: o.namespace, Name: o.name}
	wait := jobwait.Options{Timeout: o.Timeout, StuckTimeout: o.StuckTimeout}
	if dyn, err := o.factory.DynamicClient(); err == nil {
		// Without it the wait still works; a queued job then only shows as Queued.
		wait.Workload = kueue.WorkloadReader(client.Discovery(), dyn)
	}
	return cmdutil.WaitAndReport(ctx, client, target, wait, cmdutil.WaitReport{Out: o.out, Clock: o.clock, Streams: o.IOStreams})
}
