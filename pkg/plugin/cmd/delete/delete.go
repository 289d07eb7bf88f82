// Package delete implements `kubectl tao delete`: the same UID-bound foreground delete as
// cancel, for finished Jobs (kept by default, so users need a way to remove them).
package delete

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobdelete"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
)

// Options are the flags of `kubectl tao delete`.
type Options struct {
	cmdutil.DeleteFlags

	// clock tells an incomplete submit from one still running (jobstatus.WithSubmit).
	clock     clock.PassiveClock
	names     []string
	namespace string
	factory   cmdutil.Factory
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao delete`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, clk clock.PassiveClock) *cobra.Command {
	o := &Options{DeleteFlags: cmdutil.NewDeleteFlags(), clock: clk, factory: f, IOStreams: streams}
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
	o.AddFlags(cmd)
	cmd.ValidArgsFunction = cmdutil.CompleteJobNamesMulti(f)
	return cmd
}

// Complete resolves the Job names and the namespace.
func (o *Options) Complete(_ *cobra.Command, args []string) error {
	var err error
	o.namespace, o.names, err = cmdutil.CompleteJobs(o.factory, args)
	return err
}

// Run deletes each Job in turn, refusing one that has not finished, and with --wait waits for
// it to be gone.
func (o *Options) Run(ctx context.Context) error {
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return err
	}
	for _, name := range o.names {
		job, err := jobdelete.GetJob(ctx, client, o.namespace, name)
		if err != nil {
			return err
		}
		st := jobstatus.WithSubmit(jobstatus.Of(job, nil), job, o.clock.Now())
		if !st.Status.Terminal() && st.Reason != jobstatus.IncompleteSubmit {
			return fmt.Errorf("job.batch/%s is %s, not finished: cancel it with `kubectl tao cancel %s -n %s`", name, st.Status, name, o.namespace)
		}
		if err := o.DeleteJob(ctx, client, job, "deleted", o.IOStreams); err != nil {
			return err
		}
	}
	return nil
}
