package diagnose

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/printer"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/kueue"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/triage"
)

// jobCommand is what replicas and diagnose share: one JOB, the -o flag, and one read of the
// Job's evidence through triage.Collect. Each command adds its own Validate and Run.
type jobCommand struct {
	out *printer.Flags

	namespace, name string

	factory cmdutil.Factory
	clock   clock.PassiveClock
	genericiooptions.IOStreams
}

// The results of both name objects (the Job, its pods) for -o name.
func newJobCommand(f cmdutil.Factory, streams genericiooptions.IOStreams, clk clock.PassiveClock, opts ...printer.Option) jobCommand {
	return jobCommand{out: printer.NewFlags(append([]printer.Option{printer.WithNames()}, opts...)...), factory: f, clock: clk, IOStreams: streams}
}

// cobraCommand builds the command around o, the Options that embed c.
// human says what it prints without -o.
func (c *jobCommand) cobraCommand(o cmdutil.Runner, use, short, long, example, human string) *cobra.Command {
	cmd := &cobra.Command{
		Use:                   use,
		DisableFlagsInUseLine: true,
		Short:                 short,
		Long:                  long,
		Example:               example,
		Args:                  oneJob,
		RunE:                  cmdutil.RunE(o),
	}
	c.out.AddFlags(cmd.Flags(), human)
	cmd.ValidArgsFunction = cmdutil.CompleteJobNames(c.factory)
	return cmd
}

// Complete resolves the Job reference and the namespace.
func (c *jobCommand) Complete(_ *cobra.Command, args []string) error {
	var err error
	c.namespace, c.name, err = cmdutil.CompleteJob(c.factory, args)
	return err
}

// collect reads the Job's evidence. What could not be read is a warning on stderr, not an
// error: the analysis works with what there is.
func (c *jobCommand) collect(ctx context.Context, opts triage.CollectOptions) (triage.Snapshot, error) {
	client, err := c.factory.KubernetesClient()
	if err != nil {
		return triage.Snapshot{}, err
	}
	snap, warnings, err := triage.Collect(ctx, client, c.namespace, c.name, opts)
	if err != nil {
		return triage.Snapshot{}, err
	}
	for _, w := range warnings {
		fmt.Fprintf(c.ErrOut, "Warning: %s\n", w)
	}
	snap.Workload = kueue.WorkloadFor(ctx, client.Discovery(), c.factory.DynamicClient, snap.Job, c.ErrOut)
	return snap, nil
}
