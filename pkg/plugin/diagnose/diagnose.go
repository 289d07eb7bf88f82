package diagnose

import (
	"context"
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

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmdutil"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/jobresults"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/triage"
)

const example = `  # Why did my job fail, where first, and what to do
  kubectl tao diagnose ddp

  # The TAO SDK's get_failure_analysis shape, for scripts
  kubectl tao diagnose ddp -o json
  kubectl tao diagnose ddp -o jsonpath='{.err_class}'`

const long = `Explain why a training job failed or is stuck: what happened, on which rank and node it
happened first, and what to do about it.

Each finding is classed as the program's (ERR_PROGRAM: OOMKilled, a non-zero exit with its
signal named, CUDA out of memory or NCCL errors in the failing rank's last log lines) or the
infrastructure's (ERR_INFRA: image pulls, scheduling, evictions and node pressure, lost nodes,
preemption, deadlines). The job's class and suggestion are those of the earliest finding, the
likeliest root cause: when one rank dies, its peers usually fail after it.

A job that is fine (Complete, or Running with every rank healthy) is reported as such.
The exit code is 0 whenever the analysis could be made; a missing JOB exits with 3.

-o json prints the TAO SDK's get_failure_analysis shape ({err_class, suggestion,
job_failure_by_node_event: [...]}) plus fields of our own (status, job_failure,
first_failure, notes).

Reads: the Job, one pod list, one list of the namespace's Warning events, the nodes of pods
that are not progressing, and the last 50 log lines of the first rank that exited non-zero.
When a job submitted with --output-path failed and its pods are gone, the last 50 lines of each
rank's last attempt come from its log archive in S3 instead (credentials from the shell or the
job's Secret, as for 'kubectl tao logs'), and a note says so.`

// archiveTail is how many of each rank's last archived lines diagnose reads, as many as it
// reads of a live pod.
const archiveTail = 50

// Options are the flags and arguments of `kubectl tao diagnose`.
type Options struct {
	jobCommand
	// getenv gives the S3 credentials of the log archive (os.Getenv outside tests).
	getenv func(string) string
}

// NewCmd builds `kubectl tao diagnose`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, clk clock.PassiveClock, getenv func(string) string) *cobra.Command {
	o := &Options{jobCommand: newJobCommand(f, streams, clk), getenv: getenv}
	return o.cobraCommand(o, "diagnose JOB [-o FORMAT]", "Explain why a job failed or is stuck, and what to do", long, example, "the report")
}

// Validate checks the output format without contacting the server.
func (o *Options) Validate() error { return o.out.Validate() }

// Run collects the evidence, analyses it and prints the report.
func (o *Options) Run(ctx context.Context) error {
	now := o.clock.Now()
	snap, err := o.collect(ctx, triage.CollectOptions{Logs: true, Now: now})
	if err != nil {
		return err
	}
	if archived(snap) {
		arch, err := o.readArchive(ctx, snap.Job)
		if err != nil {
			fmt.Fprintf(o.ErrOut, "Warning: the pods are gone and the log archive could not be read: %v\n", err)
		}
		snap.Archive = arch
	}
	a := triage.Analyze(snap)
	if !o.out.Human() {
		return o.out.Print(o.Out, a, "job.batch/"+a.Job)
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
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return nil, err
	}
	store, err := jobresults.Connect(ctx, client, o.namespace, o.name, job, jobresults.Source{Getenv: o.getenv})
	if err != nil {
		return nil, err
	}
	_, prefix, err := store.Run(ctx, o.name, job, "")
	if err != nil {
		return nil, err
	}
	logs, err := jobresults.ReadLogArchive(ctx, store.Client, store.Bucket, prefix, nil, 0)
	if err != nil {
		return nil, err
	}
	arch := &triage.Archive{URL: store.URL(s3layout.LogArchivePrefix(prefix))}
	for _, l := range logs {
		lines := strings.Split(strings.TrimSuffix(string(l.Data), "\n"), "\n")
		r := triage.ArchivedRank{Rank: l.Rank, Pod: l.Pod, Written: l.Written, Lines: lines[max(0, len(lines)-archiveTail):]}
		// The attempts of a rank come oldest first: the last one is the one that failed the job.
		if n := len(arch.Ranks); n > 0 && arch.Ranks[n-1].Rank == l.Rank {
			arch.Ranks[n-1] = r
			continue
		}
		arch.Ranks = append(arch.Ranks, r)
	}
	return arch, nil
}

// Report writes the human report: what happened, where first, what to do, then every finding.
func Report(w io.Writer, a triage.Analysis, now time.Time) error {
	head := fmt.Sprintf("Job %s in namespace %s is %s", a.Job, a.Namespace, a.Status)
	if a.JobFailure != "" {
		head += " (" + a.JobFailure + ")"
	} else if a.Message != "" {
		head += ": " + a.Message
	}
	fmt.Fprintln(w, head+".")
	if a.ErrClass == nil {
		fmt.Fprintln(w, "No issue found.")
		for _, n := range a.Notes {
			fmt.Fprintf(w, "Note: %s.\n", n)
		}
		return nil
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
	if len(a.JobFailureByNodeEvent) < 2 {
		return nil
	}
	fmt.Fprintf(w, "\nAll %d findings, earliest first:\n", len(a.JobFailureByNodeEvent))
	return printers.NewTablePrinter(printers.PrintOptions{}).PrintObj(findingsTable(a.JobFailureByNodeEvent, now), w)
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
			rank, orNone(e.Pod), orNone(e.Node), e.NodeEventName, exit, e.ErrClass, cmdutil.Age(at, now), strings.ReplaceAll(e.Message, "\n", " "),
		}})
	}
	return t
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
