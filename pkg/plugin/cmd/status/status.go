// Package status implements `kubectl tao status`: the status of one Job, from the Job and one
// list of its pods, in the SDK's six words.
package status

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/printer"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/kueue"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

const example = `  # Human-readable status of a job
  kubectl tao status train-1

  # The stable JSON object for scripts, or just the status word
  kubectl tao status job/train-1 -o json
  kubectl tao status train-1 -o jsonpath='{.status}'`

const long = `Show the status of a training job: one of Pending, Running, Complete, Error, Canceled or
Unknown. The status comes from the Job's conditions, its deletion state and its pods (one get
and one pod list). A missing Job is Unknown and exits with code 3.

Rules: https://github.com/kubectl-tao/kubectl-tao/blob/main/docs/job-contract.md#statuses`

// Options are the flags and arguments of `kubectl tao status`.
type Options struct {
	namespace, name string
	out             *printer.Flags

	factory cmdutil.Factory
	clock   clock.PassiveClock
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao status`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, clk clock.PassiveClock) *cobra.Command {
	o := &Options{out: printer.NewFlags(printer.WithNames(), printer.WithTable()), factory: f, clock: clk, IOStreams: streams}
	cmd := &cobra.Command{
		Use:                   "status JOB [-o FORMAT]",
		DisableFlagsInUseLine: true,
		Short:                 "Show the status of a training job",
		Long:                  long,
		Example:               example,
		Args:                  cmdutil.ExactlyOneJob,
		RunE:                  cmdutil.RunE(o),
	}
	o.out.AddFlags(cmd.Flags(), "a table")
	cmd.ValidArgsFunction = cmdutil.CompleteJobNames(f)
	return cmd
}

// Complete resolves the Job reference and the namespace.
func (o *Options) Complete(_ *cobra.Command, args []string) error {
	var err error
	o.namespace, o.name, err = cmdutil.CompleteJob(o.factory, args)
	return err
}

// Validate checks the output format.
func (o *Options) Validate() error {
	return o.out.Validate()
}

// Run reads the Job and its pods and prints the summary.
func (o *Options) Run(ctx context.Context) error {
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return err
	}
	job, pods, err := jobpods.Fetch(ctx, client, o.namespace, o.name)
	switch {
	case apierrors.IsNotFound(err) && job == nil:
		s := jobstatus.Summarize(o.namespace, o.name, nil, nil, nil, o.clock.Now())
		// Scripts reading -o json get the Unknown object; people get only the error.
		if !o.out.Human() {
			if perr := cmdutil.PrintSummary(o.Out, o.out, s, o.clock.Now()); perr != nil {
				return perr
			}
		}
		return exitcode.WithCode(exitcode.NotFound, fmt.Errorf("%s: status Unknown", s.Message))
	case err != nil && job == nil:
		return fmt.Errorf("reading job.batch/%s: %w", o.name, err)
	case err != nil:
		// Without pods the Job's own counters still give the status; say what is missing.
		fmt.Fprintf(o.ErrOut, "Warning: could not list the pods of job.batch/%s, using the Job's counters: %v\n", o.name, err)
		pods = nil
	}
	now := o.clock.Now()
	return cmdutil.PrintSummary(o.Out, o.out, jobstatus.Summarize(o.namespace, o.name, job, pods, kueue.WorkloadFor(ctx, client.Discovery(), o.factory.DynamicClient, job, o.ErrOut), now), now)
}
