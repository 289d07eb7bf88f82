package stage

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/supervisor"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/checkpoint"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/logarchive"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// RunOptions are the flags of `stage run -- COMMAND...`, the container's entrypoint.
type RunOptions struct {
	Interval time.Duration
	// NoLogArchive runs the command without a log archive.
	NoLogArchive bool

	argv    []string
	getenv  func(string) string
	signals <-chan os.Signal
	// terminationLog is the kubelet's terminationMessagePath (a hang's summary goes there).
	terminationLog string

	genericiooptions.IOStreams
}

// yield lowers the supervisor's priority once the command runs; the tests, which run the
// supervisor in their own process, keep theirs.
var yield = checkpoint.Yield

// stagingError gives the supervisor's own failure code to a usage error of its call, so that it
// is never taken for the command's (see s3layout.ExitStageRun).
func stagingError(err error) error { return exitcode.WithCode(s3layout.ExitStageRun, err) }

func newRunCmd(streams genericiooptions.IOStreams, getenv func(string) string) *cobra.Command {
	o := &RunOptions{getenv: getenv, IOStreams: streams, Interval: logarchive.DefaultInterval, terminationLog: corev1.TerminationMessagePathDefault}
	cmd := &cobra.Command{
		Use:   "run -- COMMAND [ARG...]",
		Short: "Supervise the job's command in its pod: stage in, restore, run, archive its log, upload, stage out",
		Long: "The container's entrypoint when a job stages data or keeps checkpoints. In order: downloads every input ($" +
			s3layout.EnvInputs + "; exit 201 when it fails), restores the checkpoints of every rank into $" + s3layout.EnvStageCheckpointDir +
			" (exit 201 when they cannot be), runs COMMAND in a process group of its own with its output passed through and " +
			"kept in the rank's log archive, uploads its checkpoints while it runs and the last ones when it ends, archives " +
			"its log, and on rank 0 uploads every output ($" + s3layout.EnvOutputs + "; exit 202 when that fails after a success). " +
			"SIGTERM and SIGINT go to the command's process group, which is killed when its share of the grace period " +
			"($" + s3layout.EnvStageGracePeriod + ") is spent; an attempt told to stop exits 128+signal and uploads no outputs.",
		RunE: cmdutil.RunE(o),
	}
	cmd.Flags().DurationVar(&o.Interval, "interval", o.Interval, "how often the log is uploaded while the command runs")
	cmd.Flags().BoolVar(&o.NoLogArchive, "no-log-archive", o.NoLogArchive, "keep no log archive (the checkpoints are still kept)")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return stagingError(err) })
	return cmd
}

// Complete takes the command.
func (o *RunOptions) Complete(cmd *cobra.Command, args []string) error {
	if cmd.ArgsLenAtDash() != 0 || len(args) == 0 {
		return stagingError(fmt.Errorf("want `stage run -- COMMAND [ARG...]`"))
	}
	o.argv = args
	return nil
}

// Validate checks the flags.
func (o *RunOptions) Validate() error {
	if o.Interval <= 0 {
		return stagingError(fmt.Errorf("--interval must be positive"))
	}
	return nil
}

// Run supervises the command and exits with the attempt's code.
func (o *RunOptions) Run(ctx context.Context) error {
	sigs := o.signals
	if sigs == nil {
		ch := make(chan os.Signal, 4)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		defer signal.Stop(ch)
		// main catches SIGTERM and SIGINT from its start (they cancel ctx), so one that came
		// before Notify did not end this process, but it missed ch: pass it on all the same.
		if ctx.Err() != nil && len(ch) == 0 {
			ch <- syscall.SIGTERM
		}
		sigs = ch
	}
	s := &supervisor.Supervisor{Argv: o.argv, Stdin: o.In, Stdout: o.Out, Stderr: o.ErrOut, Signals: sigs,
		Getenv: o.getenv, NoLogArchive: o.NoLogArchive, Interval: o.Interval, Yield: yield, TerminationLog: o.terminationLog}
	return exitcode.Passthrough(s.Run(ctx))
}

// newStacksCmd builds `stage stacks`, which `kubectl tao stacks` runs in a rank's container
// through exec: the stacks of every Python process of the command the supervisor runs there,
// without stopping it.
func newStacksCmd(streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "stacks",
		Short: "Print the stacks of every Python process of the supervised command, without stopping it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			groups, err := supervisor.RecordedGroups()
			if err != nil {
				return exitcode.WithCode(exitcode.NotFound, err)
			}
			if _, err := supervisor.DumpStacks(cmd.Context(), groups, streams.Out); err != nil {
				return exitcode.WithCode(exitcode.NotFound, err)
			}
			return nil
		},
	}
}
