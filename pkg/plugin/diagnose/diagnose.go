package diagnose

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/utils/clock"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmdutil"
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
that are not progressing, and the last 50 log lines of the first rank that exited non-zero.`

// Options are the flags and arguments of `kubectl tao diagnose`.
type Options struct{ jobCommand }

// NewCmd builds `kubectl tao diagnose`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, clk clock.PassiveClock) *cobra.Command {
	o := &Options{newJobCommand(f, streams, clk)}
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
	a := triage.Analyze(snap)
	if !o.out.Human() {
		return o.out.Print(o.Out, a, "job.batch/"+a.Job)
	}
	return Report(o.Out, a, now)
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
