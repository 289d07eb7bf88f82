// Package replicas implements `kubectl tao replicas`: one row per rank of a job and why any is
// not progressing. The reading and the analysis live in package triage.
package replicas

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/printer"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/triage"
)

const replicasExample = `  # One row per rank: where it runs and why it is not progressing
  kubectl tao replicas ddp

  # The TAO SDK's get_job_replicas shape, for scripts
  kubectl tao replicas ddp -o json
  kubectl tao replicas ddp -o jsonpath='{range [*]}{.name}{"\t"}{.status.readiness_issue.reason}{"\n"}{end}'`

const replicasLong = `Show the pods (replicas) of a training job, one row per rank, and why any of them is not
progressing: the scheduler's own message for a pod that cannot be placed (not enough GPUs, no
node matching --node-selector, an unbound PersistentVolumeClaim), an image that cannot be
pulled (naming the image and the pull secret), a missing Secret or ConfigMap, a volume that
cannot be mounted, CrashLoopBackOff, a pod stuck terminating, or a node that is NotReady.

A partial start (some ranks running while others wait) is reported on stderr: the running
ranks then wait at the rendezvous and make no progress.

-o json and -o yaml print the TAO SDK's get_job_replicas shape: an array of
{name, rank, node, phase, status: {readiness_issue: {reason, message} | null}}.

Guide: https://github.com/kubectl-tao/kubectl-tao/blob/main/docs/diagnose.md`

// Options are the flags and arguments of `kubectl tao replicas`.
type Options struct{ cmdutil.TriageCommand }

// NewCmd builds `kubectl tao replicas`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, clk clock.PassiveClock) *cobra.Command {
	o := &Options{cmdutil.NewTriageCommand(f, streams, clk, printer.WithTable())}
	return o.CobraCommand(o, "replicas JOB [-o FORMAT]", "Show a job's pods, one per rank, and why any is stuck", replicasLong, replicasExample, "a table, one row per pod")
}

// Validate checks the output format without contacting the server.
func (o *Options) Validate() error {
	return o.Printer.Validate()
}

// Run reads the Job, its pods and their events, and prints one row per pod.
func (o *Options) Run(ctx context.Context) error {
	snap, err := o.Collect(ctx, triage.CollectOptions{Now: o.Clock.Now()})
	if err != nil {
		return err
	}
	reps, notes := triage.Replicas(snap)
	// Job-level notes go to stderr in every format, so that -o json stays the SDK's array.
	for _, n := range notes {
		fmt.Fprintf(o.ErrOut, "Warning: job %s: %s\n", o.Name, n)
	}
	if !o.Printer.Human() {
		names := make([]string, len(reps))
		for i, r := range reps {
			names[i] = "pod/" + r.Name
		}
		return o.Printer.Print(o.Out, reps, names...)
	}
	if len(reps) == 0 {
		fmt.Fprintf(o.ErrOut, "No pods found for job %s in namespace %s.\n", o.Name, o.Namespace)
		return nil
	}
	return o.Printer.PrintTable(o.Out, ReplicasTable(reps))
}

// ReplicasTable is the human view: kubectl's table, one row per pod.
func ReplicasTable(reps []triage.Replica) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Pod", Type: "string"},
		{Name: "Rank", Type: "integer"},
		{Name: "Node", Type: "string"},
		{Name: "Phase", Type: "string"},
		{Name: "Ready", Type: "string"},
		{Name: "Restarts", Type: "integer"},
		{Name: "Issue", Type: "string"},
	}}
	for _, r := range reps {
		issue := "<none>"
		if i := r.Status.ReadinessIssue; i != nil {
			issue = i.Reason
			if i.Message != "" {
				issue += ": " + i.Message
			}
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{
			r.Name, strconv.Itoa(r.Rank), cmdutil.OrNone(r.Node), r.Phase, r.Ready, strconv.Itoa(int(r.Restarts)), issue,
		}})
	}
	return t
}
