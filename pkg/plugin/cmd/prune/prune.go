// Package prune implements `kubectl tao prune`: the UID-bound foreground delete of the
// plugin's finished Jobs older than a duration (jobstatus.Expired picks them).
package prune

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobdelete"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/pages"
)

// Options are the flags of `kubectl tao prune`.
type Options struct {
	OlderThan  time.Duration
	DryRunFlag string

	dryRun    cmdutil.DryRun
	namespace string
	factory   cmdutil.Factory
	clock     clock.PassiveClock
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao prune`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, clk clock.PassiveClock) *cobra.Command {
	o := &Options{DryRunFlag: string(cmdutil.DryRunNone), factory: f, clock: clk, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "prune --older-than DURATION",
		Short: "Delete the plugin's finished jobs older than a duration",
		Long: `Delete the finished jobs (Complete or Error) that kubectl tao created in the namespace and
that finished longer ago than --older-than, and the jobs whose submit never finished
(IncompleteSubmit: left suspended by an interrupted submit) created longer ago than that.
Running and pending jobs are never touched. Each delete is UID-bound and in the foreground,
like kubectl tao delete.`,
		Example: `  # See what would go, then remove jobs finished more than a week ago
  kubectl tao prune --older-than 168h --dry-run
  kubectl tao prune --older-than 168h`,
		Args: cobra.NoArgs,
		RunE: cmdutil.RunE(o),
	}
	cmd.Flags().DurationVar(&o.OlderThan, "older-than", 0, "Prune jobs that finished longer ago than this, e.g. 24h (required).")
	cmdutil.AddDryRunFlag(cmd, &o.DryRunFlag)
	return cmd
}

// Complete resolves the namespace and the dry-run mode.
func (o *Options) Complete(cmd *cobra.Command, _ []string) error {
	var err error
	if o.dryRun, err = cmdutil.ParseDryRun(o.DryRunFlag); err != nil {
		return err
	}
	if !cmd.Flags().Changed("older-than") {
		return exitcode.Usagef("--older-than is required, e.g. --older-than 24h")
	}
	o.namespace, err = o.factory.Namespace()
	return err
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if o.OlderThan < 0 {
		return exitcode.Usagef("invalid --older-than %s: must not be negative", o.OlderThan)
	}
	return nil
}

// Run lists the plugin's Jobs (paged), picks the expired ones and deletes them.
func (o *Options) Run(ctx context.Context) error {
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return err
	}
	var jobs []batchv1.Job
	opts := metav1.ListOptions{LabelSelector: jobspec.ManagedByLabel + "=" + jobspec.ManagedByValue, Limit: 500}
	if _, err := pages.Each(ctx, opts, client.BatchV1().Jobs(o.namespace).List,
		func(page *batchv1.JobList) { jobs = append(jobs, page.Items...) }); err != nil {
		return fmt.Errorf("listing jobs: %w", err)
	}
	suffix := ""
	if o.dryRun != cmdutil.DryRunNone {
		suffix = " (dry run)"
	}
	for _, job := range jobstatus.Expired(jobs, o.clock.Now(), o.OlderThan) {
		if o.dryRun != cmdutil.DryRunClient {
			err := jobdelete.DeleteJob(ctx, client, &job, nil, o.dryRun == cmdutil.DryRunServer)
			if exitcode.Of(err) == exitcode.NotFound {
				continue // deleted or replaced meanwhile: not ours to prune any more
			}
			if err != nil {
				return err
			}
		}
		fmt.Fprintf(o.Out, "job.batch/%s pruned%s\n", job.Name, suffix)
	}
	return nil
}
