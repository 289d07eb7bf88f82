package util

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobdelete"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/outage"
)

// DeleteFlags are the flags cancel and delete share: whether to wait for the Job's pods, the
// writers, to be gone, for how long, and the pods' grace period.
type DeleteFlags struct {
	Wait        bool
	Timeout     time.Duration
	GracePeriod int
}

// NewDeleteFlags returns the defaults: wait, jobdelete's timeout, each pod's own grace period.
func NewDeleteFlags() DeleteFlags {
	return DeleteFlags{Wait: true, Timeout: jobdelete.DefaultTimeout, GracePeriod: -1}
}

// AddFlags registers --wait, --timeout and --grace-period.
func (d *DeleteFlags) AddFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&d.Wait, "wait", d.Wait, "Wait until the Job and its pods are gone before returning.")
	cmd.Flags().DurationVar(&d.Timeout, "timeout", d.Timeout, "How long to wait for the pods to go; 0 waits forever.")
	cmd.Flags().IntVar(&d.GracePeriod, "grace-period", d.GracePeriod, "Seconds each pod gets to stop after SIGTERM; -1 keeps each pod's own terminationGracePeriodSeconds (Kubernetes' default is 30).")
}

// Validate checks the flags.
func (d *DeleteFlags) Validate() error {
	if err := ValidateTimeout(d.Timeout); err != nil {
		return err
	}
	if d.GracePeriod < -1 {
		return exitcode.Usagef("invalid --grace-period %d: must be -1 (the pods' own) or more", d.GracePeriod)
	}
	return nil
}

// DeleteJob deletes job in the foreground, bound to its UID (unless it is being deleted
// already), and with --wait waits until it and its pods are gone. It reports
// "job.batch/NAME <verb>" on streams' Out once that is true, and the wait on ErrOut.
func (d *DeleteFlags) DeleteJob(ctx context.Context, client kubernetes.Interface, job *batchv1.Job, verb string, streams genericiooptions.IOStreams) error {
	var grace *int64
	if d.GracePeriod >= 0 {
		grace = ptr.To(int64(d.GracePeriod))
	}
	if job.DeletionTimestamp == nil {
		if err := jobdelete.DeleteJob(ctx, client, job, grace, false); err != nil {
			return err
		}
	}
	if !d.Wait {
		fmt.Fprintf(streams.Out, "job.batch/%s %s (deletion requested; pods may still be stopping)\n", job.Name, verb)
		return nil
	}
	fmt.Fprintf(streams.ErrOut, "Waiting for the pods of job.batch/%s to stop...\n", job.Name)
	if err := jobdelete.WaitGone(ctx, client, job, d.Timeout, outage.New(streams.ErrOut, "waiting for job.batch/"+job.Name+" to be gone", nil)); err != nil {
		return err
	}
	fmt.Fprintf(streams.Out, "job.batch/%s %s\n", job.Name, verb)
	return nil
}
