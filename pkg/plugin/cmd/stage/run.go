package stage

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/logarchive"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// EnvNodeRank is the rank variable the Job sets on multi-node pods; a single-node pod has none
// and is rank 0.
const EnvNodeRank = "NODE_RANK"

// RunOptions are the flags of `stage run -- COMMAND...`.
type RunOptions struct {
	Interval time.Duration

	argv    []string
	getenv  func(string) string
	signals <-chan os.Signal
	// upload is nil when the archive cannot be uploaded (warned about in Complete).
	upload logarchive.Upload
	genericiooptions.IOStreams
}

// stagingError gives the wrapper's own failure code to an error of `stage run` itself, so that
// it is never taken for the command's (see s3layout.ExitStageRun).
func stagingError(err error) error { return exitcode.WithCode(s3layout.ExitStageRun, err) }

func newRunCmd(streams genericiooptions.IOStreams, getenv func(string) string) *cobra.Command {
	o := &RunOptions{getenv: getenv, IOStreams: streams, Interval: logarchive.DefaultInterval}
	cmd := &cobra.Command{
		Use:   "run -- COMMAND [ARG...]",
		Short: "Run the command, passing its output through, and archive its log below the run's results prefix",
		Long: "Runs COMMAND with its stdout and stderr passed through as they come and kept in a file, uploaded to " +
			"results/<job>/<uid>/" + s3layout.ToolDir + "/logs/rank-<$" + EnvNodeRank + ">.<$" + s3layout.EnvPodName + ">.log every --interval and when it " +
			"ends; SIGTERM and SIGINT are forwarded to it; the exit code is its own. An archive that cannot be uploaded " +
			"is a warning: the command runs all the same.",
		RunE: cmdutil.RunE(o),
	}
	cmd.Flags().DurationVar(&o.Interval, "interval", o.Interval, "how often the log is uploaded while the command runs")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return stagingError(err) })
	return cmd
}

// Complete takes the command and works out where its log goes; what is missing for an upload
// is a warning, not an error: the command must run regardless.
func (o *RunOptions) Complete(cmd *cobra.Command, args []string) error {
	if cmd.ArgsLenAtDash() != 0 || len(args) == 0 {
		return stagingError(fmt.Errorf("want `stage run -- COMMAND [ARG...]`"))
	}
	o.argv = args
	if o.Interval <= 0 {
		return stagingError(fmt.Errorf("--interval must be positive"))
	}
	upload, err := o.archiveTarget()
	if err != nil {
		fmt.Fprintf(o.ErrOut, "kubectl-tao: log archive: off: %v\n", err)
		return nil
	}
	o.upload = upload
	return nil
}

// archiveTarget is the upload of this rank's archive, from the pod's environment.
func (o *RunOptions) archiveTarget() (logarchive.Upload, error) {
	cfg := s3.ConfigFromEnv(o.getenv)
	if err := cfg.Check(true, "the environment"); err != nil {
		return nil, err
	}
	prefix, err := s3layout.ResultsPrefix(o.getenv(s3layout.EnvJobID), o.getenv(s3layout.EnvJobUID))
	if err != nil {
		return nil, err
	}
	rank := 0
	if v := o.getenv(EnvNodeRank); v != "" {
		if rank, err = strconv.Atoi(v); err != nil || rank < 0 {
			return nil, fmt.Errorf("$%s=%q is not a rank", EnvNodeRank, v)
		}
	}
	client, err := s3.NewClient(cfg, nil)
	if err != nil {
		return nil, err
	}
	// One object per attempt: a retried rank's new pod must not overwrite the last one's log.
	key := s3layout.LogArchiveKey(prefix, rank, o.getenv(s3layout.EnvPodName))
	return func(ctx context.Context, r io.ReaderAt, size int64) error {
		return s3.PutSnapshot(ctx, client, cfg.Bucket, key, r, size)
	}, nil
}

// Validate has nothing left to check: Complete did.
func (o *RunOptions) Validate() error { return nil }

// Run runs the command and exits with its code.
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
	r := &logarchive.Runner{Argv: o.argv, Stdin: o.In, Stdout: o.Out, Stderr: o.ErrOut, Signals: sigs,
		Upload: o.upload, Interval: o.Interval, Log: o.ErrOut}
	if o.upload != nil {
		// Unlinked at once: the file lives as long as this process holds it, and nothing else
		// in the container sees or has to clean it up.
		f, err := os.CreateTemp("", "kubectl-tao-log-*")
		if err == nil {
			_ = os.Remove(f.Name())
			defer f.Close()
			r.Archive = f
		} else {
			fmt.Fprintf(o.ErrOut, "kubectl-tao: log archive: off: %v\n", err)
			r.Upload = nil
		}
	}
	return exitcode.Passthrough(r.Run(ctx))
}
