package cancel

import (
	"context"
	"fmt"
	"sort"
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

// PruneOptions are the flags of `kubectl tao prune`.
type PruneOptions struct {
	OlderThan  time.Duration
	DryRunFlag string

	dryRun    cmdutil.DryRun
	namespace string
	factory   cmdutil.Factory
	clock     clock.PassiveClock
	genericiooptions.IOStreams
}

// NewPruneCmd builds `kubectl tao prune`.
func NewPruneCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, clk clock.PassiveClock) *cobra.Command {
	o := &PruneOptions{DryRunFlag: string(cmdutil.DryRunNone), factory: f, clock: clk, IOStreams: streams}
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
func (o *PruneOptions) Complete(cmd *cobra.Command, _ []string) error {
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
func (o *PruneOptions) Validate() error {
	if o.OlderThan < 0 {
		return exitcode.Usagef("invalid --older-than %s: must not be negative", o.OlderThan)
	}
	return nil
}

// Run lists the plugin's Jobs (paged), picks the expired ones and deletes them.
func (o *PruneOptions) Run(ctx context.Context) error {
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
	for _, job := range Expired(jobs, o.clock.Now(), o.OlderThan) {
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

// Expired returns the finished Jobs that finished before now-olderThan, and the Jobs of
// incomplete submits (jobstatus.IncompleteSubmit) created before then, oldest first. A Job
// being deleted already is left out.
func Expired(jobs []batchv1.Job, now time.Time, olderThan time.Duration) []batchv1.Job {
	type expired struct {
		job batchv1.Job
		at  time.Time
	}
	var found []expired
	for _, j := range jobs {
		if j.DeletionTimestamp != nil {
			continue
		}
		st := jobstatus.WithSubmit(jobstatus.Of(&j, nil), &j, now)
		var t time.Time
		switch {
		case st.Reason == jobstatus.IncompleteSubmit:
			// It never ran, so it never finished: its age is what counts.
			t = j.CreationTimestamp.Time
		case st.Status == jobstatus.Complete || st.Status == jobstatus.Error:
			t = finishedAt(&j)
		default:
			continue
		}
		if !t.IsZero() && now.Sub(t) > olderThan {
			found = append(found, expired{j, t})
		}
	}
	sort.SliceStable(found, func(a, b int) bool { return found[a].at.Before(found[b].at) })
	out := make([]batchv1.Job, 0, len(found))
	for _, e := range found {
		out = append(out, e.job)
	}
	return out
}

// finishedAt is the completion time, or for failed Jobs the time the terminal condition was set.
func finishedAt(j *batchv1.Job) time.Time {
	if j.Status.CompletionTime != nil {
		return j.Status.CompletionTime.Time
	}
	var t time.Time
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobFailed || c.Type == batchv1.JobComplete) && c.LastTransitionTime.After(t) {
			t = c.LastTransitionTime.Time
		}
	}
	return t
}
