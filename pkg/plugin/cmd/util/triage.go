package util

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/printer"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/kueue"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/triage"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// TriageCommand is what replicas and diagnose share: one JOB, the -o flag, and one read of the
// Job's evidence through triage.Collect. Each command embeds it and adds its own Validate and
// Run.
type TriageCommand struct {
	Printer *printer.Flags

	Namespace, Name string

	Factory Factory
	Clock   clock.PassiveClock
	genericiooptions.IOStreams
}

// NewTriageCommand returns the shared part; the results of both name objects (the Job, its
// pods) for -o name.
func NewTriageCommand(f Factory, streams genericiooptions.IOStreams, clk clock.PassiveClock, opts ...printer.Option) TriageCommand {
	return TriageCommand{Printer: printer.NewFlags(append([]printer.Option{printer.WithNames()}, opts...)...), Factory: f, Clock: clk, IOStreams: streams}
}

// CobraCommand builds the command around o, the Options that embed c.
// human says what it prints without -o.
func (c *TriageCommand) CobraCommand(o Runner, use, short, long, example, human string) *cobra.Command {
	cmd := &cobra.Command{
		Use:                   use,
		DisableFlagsInUseLine: true,
		Short:                 short,
		Long:                  long,
		Example:               example,
		Args:                  oneJob,
		RunE:                  RunE(o),
	}
	c.Printer.AddFlags(cmd.Flags(), human)
	cmd.ValidArgsFunction = CompleteJobNames(c.Factory)
	return cmd
}

// Complete resolves the Job reference and the namespace.
func (c *TriageCommand) Complete(_ *cobra.Command, args []string) error {
	var err error
	c.Namespace, c.Name, err = CompleteJob(c.Factory, args)
	return err
}

// Collect reads the Job's evidence. What could not be read is a warning on stderr, not an
// error: the analysis works with what there is.
func (c *TriageCommand) Collect(ctx context.Context, opts triage.CollectOptions) (triage.Snapshot, error) {
	client, err := c.Factory.KubernetesClient()
	if err != nil {
		return triage.Snapshot{}, err
	}
	snap, warnings, err := triage.Collect(ctx, client, c.Namespace, c.Name, opts)
	if err != nil {
		return triage.Snapshot{}, err
	}
	for _, w := range warnings {
		fmt.Fprintf(c.ErrOut, "Warning: %s\n", w)
	}
	snap.Workload = kueue.WorkloadFor(ctx, client.Discovery(), c.Factory.DynamicClient, snap.Job, c.ErrOut)
	return snap, nil
}

// oneJob makes a missing or extra argument a usage error (exit 2), as every kubectl-tao
// command treats malformed input.
func oneJob(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return exitcode.Usagef("%s takes exactly one JOB argument, got %d", cmd.Name(), len(args))
	}
	return nil
}

// OrNone is a table cell for an optional value: kubectl's "<none>" when it is empty.
func OrNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
