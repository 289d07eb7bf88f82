// Package status implements `kubectl tao status`: the status of one Job, from the Job and one
// list of its pods, in the SDK's six words.
package status

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/printer"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/kueue"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/jobresults"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

const example = `  # Human-readable status of a job
  kubectl tao status train-1

  # The stable JSON object for scripts, or just the status word
  kubectl tao status job/train-1 -o json
  kubectl tao status train-1 -o jsonpath='{.status}'`

const long = `Show the status of a training job: one of Pending, Running, Complete, Error, Canceled or
Unknown. The status comes from the Job's conditions, its deletion state and its pods (one get
and one pod list). A missing Job is Unknown and exits with code 3. For a job with
--checkpoint-dir, -o json adds lastCheckpoint, the checkpoint a new attempt would resume from,
when the S3 credentials are at hand (the shell's or the job's Secret; one request to S3).

Rules: https://github.com/kubectl-tao/kubectl-tao/blob/main/docs/job-contract.md#statuses`

// Options are the flags and arguments of `kubectl tao status`.
type Options struct {
	namespace, name string
	out             *printer.Flags

	factory cmdutil.Factory
	clock   clock.PassiveClock
	// getenv gives the shell's S3 credentials for lastCheckpoint.
	getenv func(string) string
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao status`. getenv is os.Getenv outside tests.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, clk clock.PassiveClock, getenv func(string) string) *cobra.Command {
	o := &Options{out: printer.NewFlags(printer.WithNames(), printer.WithTable()), factory: f, clock: clk, getenv: getenv, IOStreams: streams}
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
	s := jobstatus.Summarize(o.namespace, o.name, job, pods, kueue.WorkloadFor(ctx, client.Discovery(), o.factory.DynamicClient, job, o.ErrOut), now)
	if !o.out.Human() {
		s.LastCheckpoint = o.lastCheckpoint(ctx, client, job, now)
	}
	return cmdutil.PrintSummary(o.Out, o.out, s, now)
}

// lastCheckpoint is what a new attempt would resume from, for status -o json (nil without one:
// the rest of the status stands without it).
func (o *Options) lastCheckpoint(ctx context.Context, client kubernetes.Interface, job *batchv1.Job, now time.Time) *jobstatus.CheckpointState {
	c, ok := jobresults.KeptCheckpoint(ctx, client, job, o.getenv)
	if !ok {
		return nil
	}
	return &jobstatus.CheckpointState{Path: c.Path, Layout: string(c.Layout), Files: c.Files, Size: c.Size, Written: c.Written, AgeSeconds: int64(now.Sub(c.Written) / time.Second)}
}
