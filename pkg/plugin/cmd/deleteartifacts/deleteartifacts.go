// Package deleteartifacts implements `kubectl tao delete-artifacts`: remove a finished Job and then
// its results in S3 (the job-scoped prefix results/<name>/<uid>/), and nothing else.
package deleteartifacts

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/printer"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobdelete"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/jobresults"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/outage"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

// Options are the flags of `kubectl tao delete-artifacts`.
type Options struct {
	DryRunFlag string
	Timeout    time.Duration

	name      string
	namespace string
	dryRun    cmdutil.DryRun
	out       *printer.Flags
	factory   cmdutil.Factory
	getenv    func(string) string
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao delete-artifacts`. getenv is os.Getenv outside tests.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, getenv func(string) string) *cobra.Command {
	o := &Options{DryRunFlag: string(cmdutil.DryRunNone), Timeout: jobdelete.DefaultTimeout, out: printer.NewFlags(printer.WithNames()), factory: f, getenv: getenv, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "delete-artifacts JOB",
		Short: "Delete a finished job and its results in S3",
		Long: `Delete a finished job (Complete, Error or Canceled) that has results in S3 (--output-path, or
a --workdir sent through S3), and then those results: every object under
s3://$S3_BUCKET_NAME/results/<job-name>/<job-uid>/.

The S3 credentials are ACCESS_KEY, SECRET_KEY, S3_BUCKET_NAME and S3_ENDPOINT_URL from the
shell when set, else the Secret the job was submitted with (read before the Job is deleted:
the NAME-s3 Secret is owned by the Job and goes with it). Their values are never printed.

The Job is deleted first, UID-bound and in the foreground, and the command waits until it and
its pods (the writers) are gone; only then is the prefix deleted, listed again to check it is
empty, and what was removed reported. Other runs of the same name (another UID) and other jobs
are never touched. A running or pending job is refused.

Exit codes: 0 deleted, 1 refused or failed, 3 no such job or object, 6 denied (RBAC or S3),
8 pods still there after --timeout.

Guide: https://github.com/kubectl-tao/kubectl-tao/blob/main/docs/staging.md#results-and-cleanup`,
		Example: `  # See what would be removed, then remove it
  kubectl tao delete-artifacts train-1 --dry-run
  kubectl tao delete-artifacts train-1`,
		Args: cmdutil.ExactlyOneJob,
		RunE: cmdutil.RunE(o),
	}
	cmdutil.AddDryRunFlag(cmd, &o.DryRunFlag)
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "How long to wait for the Job's pods to go; 0 waits forever.")
	o.out.AddFlags(cmd.Flags(), "what was removed, as lines")
	cmd.ValidArgsFunction = cmdutil.CompleteJobNames(f)
	return cmd
}

// Complete resolves the dry-run mode, the Job name and the namespace.
func (o *Options) Complete(_ *cobra.Command, args []string) error {
	var err error
	if o.dryRun, err = cmdutil.ParseDryRun(o.DryRunFlag); err != nil {
		return err
	}
	o.namespace, o.name, err = cmdutil.CompleteJob(o.factory, args)
	return err
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if err := cmdutil.ValidateTimeout(o.Timeout); err != nil {
		return err
	}
	return o.out.Validate()
}

// Report is what was (or, in a dry run, would be) removed; -o json prints it.
type Report struct {
	Job       string `json:"job"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
	Bucket    string `json:"bucket"`
	// Prefix is the s3:// URL of the run's results prefix.
	Prefix  string `json:"prefix"`
	Objects int    `json:"objects"`
	Bytes   int64  `json:"bytes"`
	DryRun  bool   `json:"dryRun"`
	// Keys lists the objects, in a dry run.
	Keys []s3.Object `json:"keys,omitempty"`
}

// Run refuses what it must, then deletes the Job, then its prefix.
func (o *Options) Run(ctx context.Context) error {
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return err
	}
	job, err := jobdelete.GetJob(ctx, client, o.namespace, o.name)
	if err != nil {
		return err
	}
	if err := Eligible(job); err != nil {
		return err
	}
	cfg, _, err := jobresults.Credentials(ctx, client, job.Namespace, job.Name, job, jobresults.Source{Getenv: o.getenv})
	if err != nil {
		return err
	}
	store, err := s3.NewClient(cfg, nil)
	if err != nil {
		return err
	}
	prefix, err := s3layout.ResultsPrefix(job.Name, string(job.UID))
	if err != nil {
		return err
	}
	r := Report{Job: job.Name, Namespace: job.Namespace, UID: string(job.UID), Bucket: cfg.Bucket, Prefix: "s3://" + cfg.Bucket + "/" + prefix,
		DryRun: o.dryRun != cmdutil.DryRunNone}
	// List first: it proves the credentials work before the Job (and with it the NAME-s3
	// Secret holding them) is deleted, and gives the dry run its answer.
	objs, err := s3.List(ctx, store, cfg.Bucket, prefix)
	if err != nil {
		return s3.Describe(err, "listing", r.Prefix+" (nothing was deleted)")
	}
	if r.DryRun {
		for _, obj := range objs {
			r.Objects++
			r.Bytes += obj.Size
			// Key and size only, as this report has always shown them.
			r.Keys = append(r.Keys, s3.Object{Key: obj.Key, Size: obj.Size})
		}
		if o.dryRun == cmdutil.DryRunServer {
			if err := jobdelete.DeleteJob(ctx, client, job, nil, true); err != nil {
				return err
			}
		}
		return o.print(r)
	}

	if job.DeletionTimestamp == nil {
		err := jobdelete.DeleteJob(ctx, client, job, nil, false)
		// Gone or replaced meanwhile: this run's Job is gone either way, and its prefix is its own.
		if err != nil && exitcode.Of(err) != exitcode.NotFound {
			return err
		}
	}
	fmt.Fprintf(o.ErrOut, "Waiting for the pods of job.batch/%s to stop...\n", job.Name)
	if err := jobdelete.WaitGone(ctx, client, job, o.Timeout, outage.New(o.ErrOut, "waiting for job.batch/"+job.Name+" to be gone", nil)); err != nil {
		return fmt.Errorf("%w; its results were not deleted", err)
	}
	fmt.Fprintf(o.ErrOut, "Deleting %s under %s...\n", plural.N(len(objs), "object"), r.Prefix)
	rm, err := s3.DeletePrefix(ctx, store, cfg.Bucket, prefix)
	r.Objects, r.Bytes = rm.Objects, rm.Bytes
	if err != nil {
		return fmt.Errorf("job.batch/%s deleted, but its results were not all removed (%s removed): %w\n"+
			"Remove what is left of %s with any S3 client", job.Name, plural.N(rm.Objects, "object"), err, r.Prefix)
	}
	return o.print(r)
}

// Eligible refuses Jobs that are still running or that have no results in S3.
func Eligible(job *batchv1.Job) error {
	st := jobstatus.Of(job, nil)
	if !st.Status.Terminal() {
		return fmt.Errorf("job.batch/%s is %s, not finished: its pods may still write results; wait for it (`kubectl tao wait %s -n %s`) or cancel it first",
			job.Name, st.Status, job.Name, job.Namespace)
	}
	has, err := jobresults.HasResults(job)
	if err != nil {
		return err
	}
	if !has {
		return fmt.Errorf("job.batch/%s was not submitted with --output-path, --checkpoint-dir or a --workdir through S3: it has no results in S3 (use `kubectl tao delete %s -n %s` to delete the job)",
			job.Name, job.Name, job.Namespace)
	}
	return nil
}

func (o *Options) print(r Report) error {
	if !o.out.Human() {
		return o.out.Print(o.Out, r, "job.batch/"+r.Job)
	}
	return printText(o.Out, r)
}

func printText(w io.Writer, r Report) error {
	suffix := ""
	if r.DryRun {
		suffix = " (dry run)"
		for _, k := range r.Keys {
			fmt.Fprintf(w, "s3://%s/%s (%s)\n", r.Bucket, k.Key, s3.HumanBytes(k.Size))
		}
	}
	_, err := fmt.Fprintf(w, "job.batch/%s deleted; %s (%s) removed from %s%s\n", r.Job, plural.N(r.Objects, "object"), s3.HumanBytes(r.Bytes), r.Prefix, suffix)
	return err
}
