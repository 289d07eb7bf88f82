// Package results implements `kubectl tao results`: list the objects a job's run left in S3
// (the job-scoped prefix results/<name>/<uid>/), also after the Job is gone, and every run of a
// job name with --all-runs.
package results

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/printer"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobdelete"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/jobresults"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

// Options are the flags of `kubectl tao results`.
type Options struct {
	UID      string
	AllRuns  bool
	S3Secret string
	Download string
	Include  []string

	downloadGiven bool
	name          string
	namespace     string
	out           *printer.Flags
	factory       cmdutil.Factory
	getenv        func(string) string
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao results`. getenv is os.Getenv outside tests.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, getenv func(string) string) *cobra.Command {
	o := &Options{out: printer.NewFlags(printer.WithTable()), factory: f, getenv: getenv, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "results JOB",
		Short: "List the results a job left in S3",
		Long: `List the objects a job submitted with --output-path left in S3, under
s3://$S3_BUCKET_NAME/results/<job-name>/<job-uid>/, or fetch them with --download. Results
outlive the Job: once it is gone, give the S3 credentials in the shell or with --s3-secret, and
--uid when the name has several runs (--all-runs lists them).

Guide: https://github.com/kubectl-tao/kubectl-tao/blob/main/docs/staging.md#results-and-cleanup`,
		Example: `  # What did train-1 write?
  kubectl tao results train-1

  # Every run of the name, also of Jobs that are gone; then one of them
  kubectl tao results train-1 --all-runs
  kubectl tao results train-1 --uid 5f3c2a1e-0d4b-4c6e-9a8f-2b7d1e0c9a31

  # Fetch the checkpoints (run it again to finish an interrupted download)
  kubectl tao results train-1 --download ./train-1 --include '*.pth'`,
		Args: cmdutil.ExactlyOneJob,
		RunE: cmdutil.RunE(o),
	}
	cmd.Flags().StringVar(&o.UID, "uid", "", "The run to list, a UID of the job name (see --all-runs); by default the Job's own, or the only run when the Job is gone.")
	cmd.Flags().BoolVar(&o.AllRuns, "all-runs", false, "List every run of the job name (UID, objects, size, last write) instead of one run's objects.")
	cmd.Flags().StringVar(&o.S3Secret, "s3-secret", "", "Secret with the S3 credentials (keys ACCESS_KEY, SECRET_KEY, S3_BUCKET_NAME, optional S3_ENDPOINT_URL), when the shell has none.")
	cmd.Flags().StringVar(&o.Download, "download", "", "Download the run's objects into this directory (made if missing), skipping files already complete.")
	cmd.Flags().StringArrayVar(&o.Include, "include", nil, "Only the objects whose key (relative to the run's prefix) matches this glob; a pattern without / matches the file name at any depth (repeatable).")
	_ = cmd.MarkFlagDirname("download")
	o.out.AddFlags(cmd.Flags(), "a table of the objects; with --download, what was fetched")
	cmd.ValidArgsFunction = cmdutil.CompleteJobNames(f)
	return cmd
}

// Complete resolves the Job name and the namespace.
func (o *Options) Complete(cmd *cobra.Command, args []string) error {
	o.downloadGiven = cmd.Flags().Changed("download")
	var err error
	o.namespace, o.name, err = cmdutil.CompleteJob(o.factory, args)
	return err
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if o.AllRuns && o.UID != "" {
		return exitcode.Usagef("--uid and --all-runs do not go together: --all-runs lists every run")
	}
	if o.AllRuns && (o.Download != "" || len(o.Include) > 0) {
		return exitcode.Usagef("--all-runs lists runs: --download and --include apply to one run")
	}
	if o.downloadGiven && o.Download == "" {
		return exitcode.Usagef("--download needs a directory")
	}
	if err := s3.ValidateGlobs(o.Include); err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	if err := jobresults.ValidateUID(o.name, o.UID); err != nil {
		return err
	}
	return o.out.Validate()
}

// Listing is one run's objects; -o json prints it.
type Listing struct {
	Job       string `json:"job"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
	Bucket    string `json:"bucket"`
	// Prefix is the s3:// URL of the run's results prefix; the objects' keys are relative to it.
	Prefix  string      `json:"prefix"`
	Objects []s3.Object `json:"objects"`
	// Checkpoints are the complete checkpoints of a job with --checkpoint-dir, apart from the
	// objects, which leave out the checkpoints' own.
	Checkpoints []jobresults.Checkpoint `json:"checkpoints,omitempty"`
}

// RunList is every run of a job name; -o json with --all-runs prints it.
type RunList struct {
	Job       string           `json:"job"`
	Namespace string           `json:"namespace"`
	Bucket    string           `json:"bucket"`
	Prefix    string           `json:"prefix"`
	Runs      []jobresults.Run `json:"runs"`
}

// Run finds the run and lists it.
func (o *Options) Run(ctx context.Context) error {
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return err
	}
	job, err := jobdelete.GetJob(ctx, client, o.namespace, o.name)
	switch {
	case exitcode.Of(err) == exitcode.NotFound:
		job = nil // results outlive the Job: find its run in S3
	case err != nil:
		return err
	}
	if job != nil && o.UID == "" && !o.AllRuns {
		has, err := jobresults.HasResults(job)
		if err != nil {
			return err
		}
		if !has {
			return fmt.Errorf("job.batch/%s was not submitted with --output-path, --checkpoint-dir or a --workdir through S3: it has no results in S3 (an earlier run of the name may: see --all-runs)", job.Name)
		}
	}
	lookup := jobresults.Lookup{Namespace: o.namespace, Name: o.name, Job: job, UID: o.UID, Source: jobresults.Source{Getenv: o.getenv, Secret: o.S3Secret}}
	if o.AllRuns {
		store, err := jobresults.Connect(ctx, client, lookup)
		if err != nil {
			return err
		}
		runs, err := jobresults.ListRuns(ctx, store.Client, store.Bucket, o.name)
		if err != nil {
			return err
		}
		runsPrefix, _ := s3layout.RunsPrefix(o.name) // ListRuns checked the name
		if len(runs) == 0 {
			fmt.Fprintf(o.ErrOut, "No runs under %s.\n", store.URL(runsPrefix))
		}
		return o.printRuns(RunList{Job: o.name, Namespace: o.namespace, Bucket: store.Bucket, Prefix: store.URL(runsPrefix), Runs: runs})
	}
	run, err := jobresults.FindRun(ctx, client, lookup)
	if err != nil {
		return err
	}
	uid, prefix := run.UID, run.Prefix
	l := Listing{Job: o.name, Namespace: o.namespace, UID: uid, Bucket: run.Bucket, Prefix: run.URL(prefix), Objects: []s3.Object{}}
	objs, err := s3.List(ctx, run.Client, run.Bucket, prefix)
	if err != nil {
		return s3.Describe(err, "listing", l.Prefix)
	}
	objs = s3.Included(prefix, objs, o.Include)
	if o.Download != "" {
		return o.download(ctx, run.Client, l, prefix, objs)
	}
	if l.Checkpoints, err = o.checkpoints(ctx, run, job, objs); err != nil {
		return err
	}
	for _, obj := range objs {
		if strings.HasPrefix(obj.Key, s3layout.CheckpointsPrefix(prefix)) {
			continue
		}
		obj.Key = strings.TrimPrefix(obj.Key, prefix)
		l.Objects = append(l.Objects, obj)
	}
	if len(l.Objects) == 0 && len(l.Checkpoints) == 0 {
		// The Job's own run may simply not have written yet; a run named by --uid, or the only
		// run of a Job that is gone, with nothing in it does not exist.
		if !ownRun(job, uid) && len(o.Include) == 0 {
			return exitcode.WithCode(exitcode.NotFound, fmt.Errorf("no results under %s (see the runs of %s with --all-runs)", l.Prefix, o.name))
		}
		fmt.Fprintf(o.ErrOut, "No objects under %s yet.\n", l.Prefix)
	}
	return o.printListing(l)
}

// checkpoints are the run's complete checkpoints, named as the Job names them (its
// --checkpoint-pattern; the defaults once it is gone).
func (o *Options) checkpoints(ctx context.Context, run jobresults.RunRef, job *batchv1.Job, objs []s3.Object) ([]jobresults.Checkpoint, error) {
	settings := s3layout.CheckpointSettings{}
	if job != nil {
		var err error
		if settings, _, err = jobresults.Checkpoints(job); err != nil {
			return nil, err
		}
	}
	return jobresults.ListCheckpoints(ctx, run.Client, run.Bucket, run.Prefix, objs, settings.PatternsOrDefault())
}

// Fetched is what --download did; -o json prints it.
type Fetched struct {
	Job       string `json:"job"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
	Prefix    string `json:"prefix"`
	Dir       string `json:"dir"`
	s3.Fetched
}

// download fetches objs (keys under prefix) into --download.
func (o *Options) download(ctx context.Context, store *minio.Client, l Listing, prefix string, objs []s3.Object) error {
	var total int64
	for _, obj := range objs {
		total += obj.Size
	}
	tree := s3.Tree{Bucket: l.Bucket, Prefix: prefix, Objects: objs, Dir: o.Download}
	var bar *progress
	if cmdutil.IsTerminal(o.ErrOut) {
		bar = newProgress(o.ErrOut, len(objs), total)
		tree.Progress = bar
	}
	res, err := (&s3.Stager{Client: store}).DownloadTree(ctx, tree)
	if bar != nil {
		bar.finish(err == nil)
	}
	if err != nil {
		return fmt.Errorf("%d of %s of %s in %s (%d already there); run the command again to finish: %w",
			res.Downloaded+res.Skipped, plural.N(len(objs), "object"), l.Prefix, o.Download, res.Skipped, err)
	}
	f := Fetched{Job: l.Job, Namespace: l.Namespace, UID: l.UID, Prefix: l.Prefix, Dir: o.Download, Fetched: res}
	if !o.out.Human() {
		return o.out.Print(o.Out, f)
	}
	fmt.Fprintf(o.Out, "%s (%s) downloaded from %s to %s; %d already complete\n", plural.N(res.Downloaded, "object"), s3.HumanBytes(res.Bytes), l.Prefix, o.Download, res.Skipped)
	return nil
}

func ownRun(job *batchv1.Job, uid string) bool { return job != nil && string(job.UID) == uid }

func (o *Options) printListing(l Listing) error {
	if !o.out.Human() {
		return o.out.Print(o.Out, l)
	}
	if len(l.Objects) > 0 {
		if err := o.printObjects(l); err != nil {
			return err
		}
	}
	if len(l.Checkpoints) == 0 {
		return nil
	}
	if len(l.Objects) > 0 {
		fmt.Fprintln(o.Out)
	}
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Checkpoint", Type: "string"},
		{Name: "Layout", Type: "string"},
		{Name: "Files", Type: "integer"},
		{Name: "Size", Type: "string"},
		{Name: "Ranks", Type: "string"},
		{Name: "Written", Type: "string"},
		{Name: "Complete", Type: "string"},
		{Name: "Resume", Type: "string"},
	}}
	for _, c := range l.Checkpoints {
		resume, complete := "", "no"
		if c.Resume {
			resume = "*"
		}
		if c.Complete {
			complete = "yes"
		}
		ranks := make([]string, len(c.Ranks))
		for i, r := range c.Ranks {
			ranks[i] = strconv.Itoa(r)
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{c.Path, string(c.Layout), int64(c.Files), s3.HumanBytes(c.Size), strings.Join(ranks, ","), stamp(c.Written), complete, resume}})
	}
	return o.out.PrintTable(o.Out, t)
}

// printObjects is the table of the run's objects.
func (o *Options) printObjects(l Listing) error {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Key", Type: "string"},
		{Name: "Size", Type: "string"},
		{Name: "Last-Modified", Type: "string"},
		{Name: "ETag", Type: "string", Priority: 1},
	}}
	for _, obj := range l.Objects {
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{obj.Key, s3.HumanBytes(obj.Size), stamp(obj.LastModified), strings.Trim(obj.ETag, `"`)}})
	}
	return o.out.PrintTable(o.Out, t)
}

func (o *Options) printRuns(r RunList) error {
	if !o.out.Human() {
		if r.Runs == nil {
			r.Runs = []jobresults.Run{}
		}
		return o.out.Print(o.Out, r)
	}
	if len(r.Runs) == 0 {
		return nil
	}
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "UID", Type: "string"},
		{Name: "Objects", Type: "integer"},
		{Name: "Size", Type: "string"},
		{Name: "Last-Modified", Type: "string"},
	}}
	for _, run := range r.Runs {
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{run.UID, int64(run.Objects), s3.HumanBytes(run.Bytes), stamp(run.LastModified)}})
	}
	return o.out.PrintTable(o.Out, t)
}

// stamp is a time as S3 reports it, to the second in UTC: the same on every machine.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
