// Package cancel implements `kubectl tao cancel`, `delete` and `prune` over the jobdelete engine:
// UID-bound foreground deletes that report success only once the Job's pods, the writers, are gone.
package cancel

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobdelete"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/outage"
)

// Options are the flags of `kubectl tao cancel` and `kubectl tao delete`.
type Options struct {
	Wait        bool
	Timeout     time.Duration
	GracePeriod int

	// onlyFinished makes it `delete`: refuse Jobs that are still running.
	onlyFinished bool
	// clock tells delete an incomplete submit from one still running (jobstatus.WithSubmit).
	clock     clock.PassiveClock
	names     []string
	namespace string
	factory   cmdutil.Factory
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao cancel`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{Wait: true, Timeout: jobdelete.DefaultTimeout, GracePeriod: -1, factory: f, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "cancel JOB",
		Short: "Cancel a job and wait until its pods are gone",
		Long: `Cancel a running or pending job.

The Job is deleted in the foreground with its UID as a precondition: a Job of the same name
that replaced it is never touched. The command then waits until the Job and all its pods (the
processes that may still write results) are gone, and only then reports success. The pods get
SIGTERM, then SIGKILL after their grace period. The rendezvous Service and other children go
with the Job.

Exit codes: 0 canceled, 3 no such job, 8 pods still there after --timeout (they are named).`,
		Example: `  # Cancel and wait until every rank has stopped
  kubectl tao cancel ddp

  # Give the training processes 2 minutes to checkpoint, and do not wait
  kubectl tao cancel ddp --grace-period 120 --wait=false`,
		Args: cmdutil.ExactlyOneJob,
		RunE: cmdutil.RunE(o),
	}
	o.addFlags(cmd)
	cmd.ValidArgsFunction = cmdutil.CompleteJobNames(f)
	return cmd
}

// NewDeleteCmd builds `kubectl tao delete`: the same UID-safe foreground delete, for finished
// Jobs (kept by default, so users need a way to remove them).
func NewDeleteCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, clk clock.PassiveClock) *cobra.Command {
	o := &Options{Wait: true, Timeout: jobdelete.DefaultTimeout, GracePeriod: -1, onlyFinished: true, clock: clk, factory: f, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "delete JOB...",
		Short: "Delete finished jobs (use cancel for running ones)",
		Long: `Delete one or more finished jobs (Complete or Error) and everything they own.

Each Job is deleted in the foreground with its UID as a precondition, and the command waits
until it and its pods are gone. Running or pending jobs are refused: cancel them instead. A
job whose submit never finished (status IncompleteSubmit: left suspended, never started, maybe
without some of its Service, Secrets or ConfigMaps) counts as finished: delete removes it with
whatever it owns.`,
		Example: `  kubectl tao delete train-1 train-2`,
		Args:    cobra.MinimumNArgs(1),
		RunE:    cmdutil.RunE(o),
	}
	o.addFlags(cmd)
	cmd.ValidArgsFunction = cmdutil.CompleteJobNamesMulti(f)
	return cmd
}

func (o *Options) addFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&o.Wait, "wait", o.Wait, "Wait until the Job and its pods are gone before returning.")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "How long to wait for the pods to go; 0 waits forever.")
	cmd.Flags().IntVar(&o.GracePeriod, "grace-period", o.GracePeriod, "Seconds each pod gets to stop after SIGTERM; -1 keeps each pod's own terminationGracePeriodSeconds (Kubernetes' default is 30).")
}

// Complete resolves the Job names and the namespace.
func (o *Options) Complete(_ *cobra.Command, args []string) error {
	var err error
	o.namespace, o.names, err = cmdutil.CompleteJobs(o.factory, args)
	return err
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if err := cmdutil.ValidateTimeout(o.Timeout); err != nil {
		return err
	}
	if o.GracePeriod < -1 {
		return exitcode.Usagef("invalid --grace-period %d: must be -1 (the pods' own) or more", o.GracePeriod)
	}
	return nil
}

// Run deletes each Job in turn and, with --wait, waits for it to be gone.
func (o *Options) Run(ctx context.Context) error {
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return err
	}
	var grace *int64
	if o.GracePeriod >= 0 {
		grace = ptr.To(int64(o.GracePeriod))
	}
	for _, name := range o.names {
		job, err := jobdelete.GetJob(ctx, client, o.namespace, name)
		if err != nil {
			return err
		}
		st := jobstatus.Of(job, nil)
		if o.onlyFinished {
			st = jobstatus.WithSubmit(st, job, o.clock.Now())
		}
		switch {
		case o.onlyFinished && !st.Status.Terminal() && st.Reason != jobstatus.IncompleteSubmit:
			return fmt.Errorf("job.batch/%s is %s, not finished: cancel it with `kubectl tao cancel %s -n %s`", name, st.Status, name, o.namespace)
		case !o.onlyFinished && (st.Status == jobstatus.Complete || st.Status == jobstatus.Error):
			fmt.Fprintf(o.ErrOut, "job.batch/%s already finished (%s): nothing to cancel; `kubectl tao delete %s -n %s` removes it\n",
				name, st.Status, name, o.namespace)
			continue
		}
		if job.DeletionTimestamp == nil {
			if err := jobdelete.DeleteJob(ctx, client, job, grace, false); err != nil {
				return err
			}
		}
		verb := "canceled"
		if o.onlyFinished {
			verb = "deleted"
		}
		if !o.Wait {
			fmt.Fprintf(o.Out, "job.batch/%s %s (deletion requested; pods may still be stopping)\n", name, verb)
			continue
		}
		fmt.Fprintf(o.ErrOut, "Waiting for the pods of job.batch/%s to stop...\n", name)
		if err := jobdelete.WaitGone(ctx, client, job, o.Timeout, outage.New(o.ErrOut, "waiting for job.batch/"+name+" to be gone", nil)); err != nil {
			return err
		}
		fmt.Fprintf(o.Out, "job.batch/%s %s\n", name, verb)
	}
	return nil
}
