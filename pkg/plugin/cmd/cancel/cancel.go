// Package cancel implements `kubectl tao cancel`: a UID-bound foreground delete of a running or
// pending Job that reports success only once the Job's pods, the writers, are gone.
package cancel

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobdelete"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
)

// Options are the flags of `kubectl tao cancel`.
type Options struct {
	cmdutil.DeleteFlags

	name      string
	namespace string
	factory   cmdutil.Factory
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao cancel`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{DeleteFlags: cmdutil.NewDeleteFlags(), factory: f, IOStreams: streams}
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
	o.AddFlags(cmd)
	cmd.ValidArgsFunction = cmdutil.CompleteJobNames(f)
	return cmd
}

// Complete resolves the Job name and the namespace.
func (o *Options) Complete(_ *cobra.Command, args []string) error {
	var err error
	o.namespace, o.name, err = cmdutil.CompleteJob(o.factory, args)
	return err
}

// Run deletes the Job unless it has finished and, with --wait, waits for it to be gone.
func (o *Options) Run(ctx context.Context) error {
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return err
	}
	job, err := jobdelete.GetJob(ctx, client, o.namespace, o.name)
	if err != nil {
		return err
	}
	if st := jobstatus.Of(job, nil); st.Status == jobstatus.Complete || st.Status == jobstatus.Error {
		fmt.Fprintf(o.ErrOut, "job.batch/%s already finished (%s): nothing to cancel; `kubectl tao delete %s -n %s` removes it\n",
			o.name, st.Status, o.name, o.namespace)
		return nil
	}
	return o.DeleteJob(ctx, client, job, "canceled", o.IOStreams)
}
