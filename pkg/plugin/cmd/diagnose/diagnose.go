// Package diagnose implements `kubectl tao diagnose`: why a job failed or is stuck, and what to
// do, from its live objects or, once it is gone, its log archive. The reading and the analysis
// live in package triage; the run in S3 is found, and its archive read, by jobresults.
package diagnose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/utils/clock"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobtop"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/tail"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/triage"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/jobresults"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

const example = `  # Why did my job fail, where first, and what to do
  kubectl tao diagnose ddp

  # The TAO SDK's get_failure_analysis shape, for scripts
  kubectl tao diagnose ddp -o json
  kubectl tao diagnose ddp -o jsonpath='{.err_class}'

  # A Job that is gone (deleted, TTL'd): from its run's log archive in S3 (jobs run with
  # --output-path), with the S3 credentials in the shell or in a Secret
  kubectl tao diagnose ddp --s3-secret team-s3
  kubectl tao diagnose ddp --uid 5f3c2a1e-0d4b-4c6e-9a8f-2b7d1e0c9a31`

const long = `Explain why a training job failed or is stuck: what happened, on which rank and node it
happened first, and what to do about it. Each finding is the program's (ERR_PROGRAM) or the
infrastructure's (ERR_INFRA), and the earliest is the likeliest root cause; -o json prints the
TAO SDK's get_failure_analysis shape. Once its pods or the Job itself are gone, a job submitted
with --output-path is diagnosed from its log archive in S3.

Guide: https://github.com/kubectl-tao/kubectl-tao/blob/main/docs/diagnose.md`

// archiveTail is how many of each rank's last archived lines diagnose reads, as many as it
// reads of a live pod.
const archiveTail = 50

// Options are the flags and arguments of `kubectl tao diagnose`.
type Options struct {
	cmdutil.TriageCommand
	// UID names the run to diagnose from its log archive once its Job is gone.
	UID string
	// S3Secret names a Secret with the archive's S3 credentials, when the shell has none.
	S3Secret string
	// SilentAfter is how long a rank of a running job may stay quiet before it is a finding.
	SilentAfter time.Duration
	// getenv gives the S3 credentials of the log archive (os.Getenv outside tests).
	getenv func(string) string
}

// NewCmd builds `kubectl tao diagnose`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, clk clock.PassiveClock, getenv func(string) string) *cobra.Command {
	o := &Options{TriageCommand: cmdutil.NewTriageCommand(f, streams, clk), getenv: getenv, SilentAfter: jobtop.DefaultSilentAfter}
	cmd := o.CobraCommand(o, "diagnose JOB [--uid UID] [-o FORMAT]", "Explain why a job failed or is stuck, and what to do", long, example, "the report")
	cmd.Flags().StringVar(&o.UID, "uid", o.UID, "The run to diagnose from its log archive once its Job is gone, when the name has several runs (see 'kubectl tao results --all-runs').")
	cmd.Flags().DurationVar(&o.SilentAfter, "silent-after", o.SilentAfter, "Of a running job: how long a rank that printed may stay quiet before it is a finding (see 'kubectl tao top').")
	cmd.Flags().StringVar(&o.S3Secret, "s3-secret", o.S3Secret, "Secret with the S3 credentials of the log archive, when the shell has none and the Job is gone.")
	return cmd
}

// Validate checks the flags without contacting the server.
func (o *Options) Validate() error {
	if err := jobresults.ValidateUID(o.Name, o.UID); err != nil {
		return err
	}
	if o.SilentAfter <= 0 {
		return exitcode.Usagef("--silent-after must be more than 0, got %s", o.SilentAfter)
	}
	return o.Printer.Validate()
}

// Run collects the evidence, analyses it and prints the report. A Job that is gone, or a run
// of its name other than the Job's (--uid), is diagnosed from the run's log archive alone.
func (o *Options) Run(ctx context.Context) error {
	// A running job's health reads each rank's last line, all at once as logs --tail 1 does.
	cmdutil.RaiseRateLimit(o.Factory, tail.DefaultMaxLogRequests)
	now := o.Clock.Now()
	snap, err := o.Collect(ctx, triage.CollectOptions{Logs: true, Now: now})
	switch {
	case exitcode.Of(err) == exitcode.NotFound:
		return o.runGone(ctx, nil, true, now)
	case err != nil:
		return err
	case o.UID != "" && o.UID != string(snap.Job.UID):
		return o.runGone(ctx, snap.Job, false, now)
	}
	if archived(snap) {
		arch, err := o.readArchive(ctx, snap.Job)
		if err != nil {
			fmt.Fprintf(o.ErrOut, "Warning: the pods are gone and the log archive could not be read: %v\n", err)
		}
		snap.Archive = arch
	}
	a := triage.Analyze(snap)
	if a.Status == string(jobstatus.Running) {
		a = triage.WithHealth(a, o.health(ctx, snap, now))
	}
	if note := o.checkpointNote(ctx, snap.Job, a.Status, now); note != "" {
		a.Notes = append(a.Notes, note)
	}
	return o.print(a, now)
}

// health reads a running job's training as top does (GPU use, last output, progress) and
// returns its findings; none when the reading cannot be made.
func (o *Options) health(ctx context.Context, snap triage.Snapshot, now time.Time) []triage.NodeEvent {
	r, err := cmdutil.TrainingReader(o.Factory, o.SilentAfter, false)
	if err != nil {
		return nil
	}
	j := r.Read(ctx, []jobtop.Target{{Job: snap.Job, Pods: snap.Pods}}, now)[0]
	return j.Findings
}

// checkpointNote says where a failed or suspended job with --checkpoint-dir would go on from,
// read with the S3 credentials at hand (see jobresults.KeptCheckpoint).
func (o *Options) checkpointNote(ctx context.Context, job *batchv1.Job, status string, now time.Time) string {
	settings, ok, err := jobresults.Checkpoints(job)
	if err != nil || !ok {
		return ""
	}
	if !triage.NeedsCheckpointNote(job, status) {
		return "" // no S3 request for a job that runs or ended well
	}
	client, err := o.Factory.KubernetesClient()
	if err != nil {
		return ""
	}
	kept := triage.KeptCheckpoint{Dir: settings.Dir, OnVolume: settings.OnVolume}
	if c, ok := jobresults.KeptCheckpoint(ctx, client, job, o.getenv); ok {
		kept.Path, kept.Written = c.Path, c.Written
		kept.Detail = fmt.Sprintf("%s, %s, %s", c.Layout, plural.N(c.Files, "file"), s3.HumanBytes(c.Size))
	}
	return triage.CheckpointNote(job, status, kept, now)
}

// runGone diagnoses the run --uid names, or the only run of the name, from its log archive
// alone: its Job is gone (jobGone), or live is a newer run of the same name, whose Secret may
// give the credentials. A Job gone with no archive to read is NotFound, as it was before
// archives.
func (o *Options) runGone(ctx context.Context, live *batchv1.Job, jobGone bool, now time.Time) error {
	missing := fmt.Sprintf("job %q not found in namespace %q", o.Name, o.Namespace)
	// The Job is gone (or live is another run): the run is the one --uid names, or the only one
	// of the name.
	run, err := o.findRun(ctx, live)
	if err != nil {
		var noStore *jobresults.ConnectError
		if jobGone && errors.As(err, &noStore) && exitcode.Of(err) == exitcode.Usage {
			return exitcode.WithCode(exitcode.NotFound, fmt.Errorf("%s; to diagnose it from its log archive instead: %w", missing, err))
		}
		return err
	}
	arch, err := readRun(ctx, run)
	if err != nil {
		if jobGone && exitcode.Of(err) == exitcode.NotFound {
			return fmt.Errorf("%s, and %w", missing, err)
		}
		return err
	}
	return o.print(triage.AnalyzeArchive(o.Name, o.Namespace, arch), now)
}

func (o *Options) print(a triage.Analysis, now time.Time) error {
	if !o.Printer.Human() {
		return o.Printer.Print(o.Out, a, "job.batch/"+a.Job)
	}
	return Report(o.Out, a, now)
}

// archived reports whether the failure must be read from the log archive: a staged Job that
// failed with no pod left to read.
func archived(snap triage.Snapshot) bool {
	if snap.Job == nil || len(snap.Pods) > 0 || jobstatus.Of(snap.Job, nil).Status != jobstatus.Error {
		return false
	}
	_, staged := snap.Job.Annotations[s3layout.AnnotationOutputs]
	return staged
}

// readArchive reads the last lines of each rank's last attempt from the Job's log archive.
func (o *Options) readArchive(ctx context.Context, job *batchv1.Job) (*triage.Archive, error) {
	run, err := o.findRun(ctx, job)
	if err != nil {
		return nil, err
	}
	return readRun(ctx, run)
}

// findRun finds the run in S3 as logs does: the credentials from the shell, --s3-secret, or
// the Secret of job (nil when gone); the run --uid names, else job's, else the only one.
func (o *Options) findRun(ctx context.Context, job *batchv1.Job) (jobresults.RunRef, error) {
	client, err := o.Factory.KubernetesClient()
	if err != nil {
		return jobresults.RunRef{}, &jobresults.ConnectError{Err: err}
	}
	return jobresults.FindRun(ctx, client, jobresults.Lookup{Namespace: o.Namespace, Name: o.Name, Job: job, UID: o.UID,
		Source: jobresults.Source{Getenv: o.getenv, Secret: o.S3Secret}})
}

// readRun reads the last lines of each rank's last attempt of run.
func readRun(ctx context.Context, run jobresults.RunRef) (*triage.Archive, error) {
	logs, err := run.ReadLogs(ctx, nil, 0)
	if err != nil {
		return nil, err
	}
	arch := &triage.Archive{URL: run.LogArchiveURL(), UID: run.UID}
	for _, l := range logs {
		lines, err := l.LastLines(archiveTail)
		if err != nil {
			return nil, err
		}
		r := triage.ArchivedRank{Rank: l.Rank, Pod: l.Pod, Written: l.Written, Lines: lines}
		// The attempts of a rank come oldest first: the last one is the one that failed the job.
		if n := len(arch.Ranks); n > 0 && arch.Ranks[n-1].Rank == l.Rank {
			arch.Ranks[n-1] = r
			continue
		}
		arch.Ranks = append(arch.Ranks, r)
	}
	return arch, nil
}

// reportLines is how many of each archived rank's last lines the human report shows; -o json
// carries all that were read.
const reportLines = 10

// Report writes the human report: what happened, where first, what to do, then every finding,
// then, when the findings come from a log archive, each rank's last archived lines.
func Report(w io.Writer, a triage.Analysis, now time.Time) error {
	gone := a.Archive != nil && a.Archive.JobGone
	head := fmt.Sprintf("Job %s in namespace %s is %s", a.Job, a.Namespace, a.Status)
	switch {
	case gone:
		head = fmt.Sprintf("Job %s in namespace %s is gone: this is the diagnosis of run %s from its log archive alone, "+
			"with no Job, pod or event evidence left", a.Job, a.Namespace, a.Archive.UID)
	case a.JobFailure != "":
		head += " (" + a.JobFailure + ")"
	case a.Message != "":
		head += ": " + a.Message
	}
	fmt.Fprintln(w, head+".")
	if a.ErrClass == nil {
		if gone {
			fmt.Fprintln(w, "No known error in the archived logs.")
		} else {
			fmt.Fprintln(w, "No issue found.")
		}
		for _, n := range a.Notes {
			fmt.Fprintf(w, "Note: %s.\n", n)
		}
		return archivedLines(w, a, now)
	}
	fmt.Fprintln(w)
	if f := a.FirstFailure; f != nil {
		what := fmt.Sprintf("rank %d: %s", f.Rank, f.NodeEventName)
		if f.Rank < 0 {
			what = "the Job: " + f.NodeEventName
		}
		if f.Message != "" {
			what += " (" + f.Message + ")"
		}
		fmt.Fprintf(w, "What happened: %s. Class: %s.\n", what, *a.ErrClass)
		if f.Pod != "" {
			where := "pod " + f.Pod
			if f.Node != "" {
				where += " on node " + f.Node
			}
			if f.Time != nil {
				where += ", " + when(*f.Time, now)
			}
			fmt.Fprintf(w, "Where first:   %s.\n", where)
		}
	} else {
		fmt.Fprintf(w, "What happened: the Job failed and no pod is left to tell why. Class: %s.\n", *a.ErrClass)
	}
	fmt.Fprintf(w, "What to do:    %s\n", a.Suggestion)
	for _, n := range a.Notes {
		fmt.Fprintf(w, "Note: %s.\n", n)
	}
	if len(a.JobFailureByNodeEvent) >= 2 {
		fmt.Fprintf(w, "\nAll %d findings, earliest first:\n", len(a.JobFailureByNodeEvent))
		if err := printers.NewTablePrinter(printers.PrintOptions{}).PrintObj(findingsTable(a.JobFailureByNodeEvent, now), w); err != nil {
			return err
		}
	}
	return archivedLines(w, a, now)
}

// archivedLines writes, when the analysis read a log archive, the rank that stopped first and
// the last lines of each rank's last attempt.
func archivedLines(w io.Writer, a triage.Analysis, now time.Time) error {
	ev := a.Archive
	if ev == nil || len(ev.Ranks) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	if ev.FirstToStop != nil {
		fmt.Fprintf(w, "Rank %d stopped first: its archived log was the first to stop growing.\n", *ev.FirstToStop)
	}
	fmt.Fprintf(w, "The last lines of each rank's last attempt, from %s (all of them: kubectl tao logs %s --uid %s):\n", ev.URL, a.Job, ev.UID)
	for _, r := range ev.Ranks {
		fmt.Fprintf(w, "[rank %d] pod %s, last written %s:\n", r.Rank, r.Pod, when(r.Written, now))
		for _, l := range r.Lines[max(0, len(r.Lines)-reportLines):] {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
	return nil
}

func when(t, now time.Time) string {
	return fmt.Sprintf("at %s (%s ago)", t.UTC().Format(time.RFC3339), duration.HumanDuration(now.Sub(t)))
}

func findingsTable(events []triage.NodeEvent, now time.Time) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Rank", Type: "string"},
		{Name: "Pod", Type: "string"},
		{Name: "Node", Type: "string"},
		{Name: "Event", Type: "string"},
		{Name: "Exit", Type: "string"},
		{Name: "Class", Type: "string"},
		{Name: "Age", Type: "string"},
		{Name: "Message", Type: "string"},
	}}
	for _, e := range events {
		rank, exit, at := strconv.Itoa(e.Rank), "<none>", time.Time{}
		if e.Rank < 0 {
			rank = "job"
		}
		if e.ExitCode != nil {
			exit = strconv.Itoa(int(*e.ExitCode))
		}
		if e.Time != nil {
			at = *e.Time
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{
			rank, cmdutil.OrNone(e.Pod), cmdutil.OrNone(e.Node), e.NodeEventName, exit, e.ErrClass, cmdutil.Age(at, now), strings.ReplaceAll(e.Message, "\n", " "),
		}})
	}
	return t
}
