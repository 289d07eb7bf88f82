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
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/checkpoint"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/logarchive"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// RunOptions are the flags of `stage run -- COMMAND...`.
type RunOptions struct {
	Interval time.Duration
	// NoLogArchive runs the command for its checkpoints alone: no log is kept.
	NoLogArchive bool

	argv    []string
	getenv  func(string) string
	signals <-chan os.Signal
	// upload is nil when the archive cannot be uploaded (warned about in Complete).
	upload logarchive.Upload
	// checkpoints is set when the Job keeps checkpoints (TAO_STAGE_CHECKPOINT_DIR).
	checkpoints *checkpoint.Config

	genericiooptions.IOStreams
}

// yield lowers the wrapper's priority once the command runs; the tests, which run the wrapper
// in their own process, keep theirs.
var yield = checkpoint.Yield

// stagingError gives the wrapper's own failure code to an error of `stage run` itself, so that
// it is never taken for the command's (see s3layout.ExitStageRun).
func stagingError(err error) error { return exitcode.WithCode(s3layout.ExitStageRun, err) }

func newRunCmd(streams genericiooptions.IOStreams, getenv func(string) string) *cobra.Command {
	o := &RunOptions{getenv: getenv, IOStreams: streams, Interval: logarchive.DefaultInterval}
	cmd := &cobra.Command{
		Use:   "run -- COMMAND [ARG...]",
		Short: "Run the command, passing its output through, and archive its log below the run's results prefix",
		Long: "Runs COMMAND with its stdout and stderr passed through as they come and kept in a file, uploaded to " +
			"results/<job>/<uid>/" + s3layout.ToolDir + "/logs/rank-<$" + jobspec.EnvNodeRank + ">.<$" + s3layout.EnvPodName + ">.log every --interval and when it " +
			"ends; SIGTERM and SIGINT are forwarded to it; the exit code is its own, or 128+signal once one came (a stopped " +
			"attempt never counts as done). An archive that cannot be uploaded " +
			"is a warning: the command runs all the same. With $" + s3layout.EnvStageCheckpointDir + " the checkpoints of every rank are " +
			"restored into it first (exit 201 when they cannot be), the command is told " + s3layout.EnvCheckpointDir + ", " + s3layout.EnvAttempt +
			" and " + s3layout.EnvResumeCheckpoint + ", its complete files are uploaded while it runs, and flushed when it ends, before the log " +
			"archive (exit 202 when that fails after a success).",
		RunE: cmdutil.RunE(o),
	}
	cmd.Flags().DurationVar(&o.Interval, "interval", o.Interval, "how often the log is uploaded while the command runs")
	cmd.Flags().BoolVar(&o.NoLogArchive, "no-log-archive", o.NoLogArchive, "keep no log archive (the checkpoints are still kept)")
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
	if o.getenv(s3layout.EnvStageCheckpointDir) != "" {
		// Unlike the log archive, kept checkpoints are not optional: an attempt that cannot
		// restore them would start over from step 0 (exit 201, no retry spent).
		c, err := checkpointTarget(o.getenv)
		if err != nil {
			return exitcode.WithCode(s3layout.ExitStageIn, fmt.Errorf("checkpoints: %w", err))
		}
		o.checkpoints = c
	}
	if o.NoLogArchive {
		return nil
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
	rank, err := nodeRank(o.getenv)
	if err != nil {
		return nil, err
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
	var finished error
	if o.checkpoints != nil {
		c := o.checkpoints
		// The restore and the uploads are said in the attempt's archive too.
		notes := logarchive.NewNotes(o.ErrOut)
		r.Notes = notes
		start := func() (*checkpoint.Session, error) {
			return checkpoint.Start(ctx, c.Target, o.getenv(s3layout.EnvPodName), c.Keep, notes)
		}
		if c.OnVolume {
			start = func() (*checkpoint.Session, error) {
				return checkpoint.StartOnVolume(c.Target, o.getenv(s3layout.EnvPodName), notes)
			}
		}
		var sess *checkpoint.Session
		// Inside the runner, so that an attempt whose restore fails still leaves its archive.
		r.Prepare = func() ([]string, error) {
			s, err := start()
			if err != nil {
				return nil, exitcode.WithCode(s3layout.ExitStageIn, err)
			}
			sess = s
			return s.Env(), nil
		}
		// The uploads must never take the CPUs that feed the GPUs.
		r.Started = yield
		r.Ended = func() { finished = sess.Finish(ctx, c.FinalTimeout()) }
		// The checkpoints took up to half the grace period; the archive and the outputs share
		// the rest.
		if c.Grace > 0 {
			r.FinalTimeout = max(logarchive.DefaultFinalTimeout, c.Grace/4)
		}
	}
	code, err := r.Run(ctx)
	if stop := stopSignal(r.Signalled, sigs); stop != 0 {
		return o.stopped(stop, code, err, finished)
	}
	if err != nil {
		return err
	}
	if finished != nil {
		if code == 0 {
			return finished
		}
		fmt.Fprintf(o.ErrOut, "kubectl-tao: %v\n", finished)
	}
	return exitcode.Passthrough(code)
}

// stopSignal is the stop signal this process got, 0 when none: the last one forwarded to the
// command, or one still pending because nothing ran to take it (during the restore, or after
// the command ended).
func stopSignal(forwarded os.Signal, pending <-chan os.Signal) syscall.Signal {
	sig := forwarded
	select {
	case s := <-pending:
		sig = s
	default:
	}
	s, _ := sig.(syscall.Signal)
	return s
}

// stopped ends an attempt the pod was told to stop: 128+signal whatever the command's code,
// because an exit 0 would have the Job record the index as done, and retry it never.
func (o *RunOptions) stopped(sig syscall.Signal, code int, prepareErr, finished error) error {
	name := map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT"}[sig]
	if name == "" {
		name = sig.String()
	}
	want := 128 + int(sig)
	switch {
	case prepareErr != nil:
		fmt.Fprintf(o.ErrOut, "kubectl-tao: the pod was told to stop (%s) before the command ran: exiting %d (%v)\n", name, want, prepareErr)
		return exitcode.Passthrough(want)
	case finished != nil:
		fmt.Fprintf(o.ErrOut, "kubectl-tao: %v\n", finished)
	}
	if code != want {
		fmt.Fprintf(o.ErrOut, "kubectl-tao: the pod was told to stop (%s): the command exited %d; exiting %d so that this attempt does not count as done\n",
			name, code, want)
	}
	return exitcode.Passthrough(want)
}

// checkpointTarget reads the checkpoint settings submit gave the pod, for this rank.
func checkpointTarget(getenv func(string) string) (*checkpoint.Config, error) {
	rank, err := nodeRank(getenv)
	if err != nil {
		return nil, err
	}
	c, err := checkpoint.FromEnv(getenv, rank)
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// nodeRank is the pod's rank: $NODE_RANK, which the Job sets on multi-node pods; a single-node
// pod has none and is rank 0.
func nodeRank(getenv func(string) string) (int, error) {
	v := getenv(jobspec.EnvNodeRank)
	if v == "" {
		return 0, nil
	}
	rank, err := strconv.Atoi(v)
	if err != nil || rank < 0 {
		return 0, fmt.Errorf("$%s=%q is not a rank", jobspec.EnvNodeRank, v)
	}
	return rank, nil
}
