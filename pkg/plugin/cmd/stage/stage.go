// Package stage implements the hidden `kubectl-tao stage` command that runs inside a Job's pod:
// `install DIR` (the init container copies this binary into a shared volume), `workdir` (an
// init container unpacks the --workdir snapshot), `in` (download every input before the user's
// command), `run` (run the command, archiving its log: the runner is the engine logarchive) and
// `out` (upload every output after it). The transfers themselves are in the S3 client package
// s3; this is the thin layer that reads the pod's environment.
package stage

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/workdir"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// NewCmd builds the hidden `kubectl-tao stage` command. getenv is os.Getenv outside tests.
func NewCmd(streams genericiooptions.IOStreams, getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{
		Use:    "stage",
		Short:  "Move a job's data between S3 and its pod (run inside the pod by the job's wrapper)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(
		newTransferCmd(streams, getenv, true),
		newTransferCmd(streams, getenv, false),
		newInstallCmd(streams, os.Executable),
		newWorkdirCmd(streams, getenv),
		newRunCmd(streams, getenv),
		newStacksCmd(streams),
		newMPIAgentCmd(streams, getenv),
		newMPIProcCmd(streams, getenv),
		newMPISSHCmd(streams),
	)
	return cmd
}

// Options are the flags of `stage in` and `stage out`.
type Options struct {
	// Inputs and Outputs replace TAO_STAGE_INPUTS and TAO_STAGE_OUTPUTS when given.
	Inputs  []string
	Outputs []string
	// JobID and JobUID replace TAO_JOB_ID and TAO_JOB_UID when given.
	JobID, JobUID string
	Parallel      int
	Attempts      int
	IdleTimeout   time.Duration

	in      bool
	getenv  func(string) string
	inputs  []s3layout.Input
	outputs []string
	cfg     s3.Config
	genericiooptions.IOStreams
}

func newTransferCmd(streams genericiooptions.IOStreams, getenv func(string) string, in bool) *cobra.Command {
	o := &Options{in: in, getenv: getenv, IOStreams: streams,
		Parallel: s3.DefaultParallel, Attempts: s3.DefaultAttempts, IdleTimeout: s3.DefaultIdleTimeout}
	cmd := &cobra.Command{
		Use:   "in",
		Short: "Download every input (" + s3layout.EnvInputs + ") to its path",
		Args:  cobra.NoArgs,
		RunE:  cmdutil.RunE(o),
	}
	if in {
		cmd.Flags().StringArrayVar(&o.Inputs, "input", nil, "CONTAINER_PATH=s3://BUCKET/KEY to download, repeatable; replaces $"+s3layout.EnvInputs)
	} else {
		cmd.Use = "out"
		cmd.Short = "Upload every output (" + s3layout.EnvOutputs + ") below the run's results prefix"
		cmd.Flags().StringArrayVar(&o.Outputs, "output", nil, "container path to upload, repeatable; replaces $"+s3layout.EnvOutputs)
		cmd.Flags().StringVar(&o.JobID, "job-id", "", "job name of the results prefix; replaces $"+s3layout.EnvJobID)
		cmd.Flags().StringVar(&o.JobUID, "job-uid", "", "job UID of the results prefix; replaces $"+s3layout.EnvJobUID)
	}
	cmd.Flags().IntVar(&o.Parallel, "parallel", o.Parallel, "concurrent object transfers")
	cmd.Flags().IntVar(&o.Attempts, "attempts", o.Attempts, "tries per object before its error is final")
	cmd.Flags().DurationVar(&o.IdleTimeout, "idle-timeout", o.IdleTimeout, "retry a download that receives nothing for this long")
	return cmd
}

// Complete reads the environment where flags were not given.
func (o *Options) Complete(cmd *cobra.Command, _ []string) error {
	o.cfg = s3.ConfigFromEnv(o.getenv)
	if o.in {
		var err error
		if cmd.Flags().Changed("input") {
			for _, s := range o.Inputs {
				in, perr := s3layout.ParseInput(s)
				if perr != nil {
					return exitcode.WithCode(exitcode.Usage, perr)
				}
				o.inputs = append(o.inputs, in)
			}
		} else if o.inputs, err = s3layout.DecodeInputs(o.getenv(s3layout.EnvInputs)); err != nil {
			return exitcode.Usagef("$%s: %w", s3layout.EnvInputs, err)
		}
		return nil
	}
	if !cmd.Flags().Changed("job-id") {
		o.JobID = o.getenv(s3layout.EnvJobID)
	}
	if !cmd.Flags().Changed("job-uid") {
		o.JobUID = o.getenv(s3layout.EnvJobUID)
	}
	var err error
	if cmd.Flags().Changed("output") {
		o.outputs, err = s3layout.DecodeOutputs(strings.Join(o.Outputs, "\n"))
	} else {
		o.outputs, err = s3layout.DecodeOutputs(o.getenv(s3layout.EnvOutputs))
	}
	if err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	return nil
}

// Validate checks the credentials and, for out, the results prefix.
func (o *Options) Validate() error {
	if o.Parallel < 1 || o.Attempts < 1 || o.IdleTimeout <= 0 {
		return exitcode.Usagef("--parallel and --attempts must be at least 1, --idle-timeout positive")
	}
	if o.in && len(o.inputs) == 0 || !o.in && len(o.outputs) == 0 {
		return nil // nothing to move: no credentials needed
	}
	if err := o.cfg.Check(!o.in, "the environment"); err != nil {
		return err
	}
	if !o.in {
		if _, err := s3layout.ResultsPrefix(o.JobID, o.JobUID); err != nil {
			return exitcode.Usagef("$%s and $%s name the results prefix: %w", s3layout.EnvJobID, s3layout.EnvJobUID, err)
		}
	}
	return nil
}

// direction is the name of the command: `stage in` or `stage out`.
func (o *Options) direction() string {
	if o.in {
		return "in"
	}
	return "out"
}

// Run moves the data; progress and sizes go to stderr.
func (o *Options) Run(ctx context.Context) error {
	if o.in && len(o.inputs) == 0 || !o.in && len(o.outputs) == 0 {
		fmt.Fprintf(o.ErrOut, "stage %s: nothing to do\n", o.direction())
		return nil
	}
	client, err := s3.NewClient(o.cfg, nil)
	if err != nil {
		return err
	}
	s := &s3.Stager{Client: client, Log: o.ErrOut, Parallel: o.Parallel, Attempts: o.Attempts, IdleTimeout: o.IdleTimeout}
	if o.in {
		return s.Download(ctx, o.inputs)
	}
	return s.Upload(ctx, s3.Run{Bucket: o.cfg.Bucket, JobID: o.JobID, JobUID: o.JobUID}, o.outputs)
}

// newInstallCmd builds `stage install DIR`: the init container's copy of this binary into the
// shared volume, as DIR/kubectl-tao with mode 0755, written to a temporary name and renamed so
// the main container never sees a half-written file.
func newInstallCmd(streams genericiooptions.IOStreams, executable func() (string, error)) *cobra.Command {
	return &cobra.Command{
		Use:   "install DIR",
		Short: "Copy this binary into DIR as " + filepath.Base(s3layout.StagerBinary),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			self, err := executable()
			if err != nil {
				return fmt.Errorf("finding this binary: %w", err)
			}
			dest, err := Install(self, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(streams.ErrOut, "installed %s\n", dest)
			return nil
		},
	}
}

// linkMPI makes dir's tao-mpi-agent and tao-mpi-ssh links to the binary, which runs `stage
// mpi-agent` or `stage mpi-ssh` when called by that name (plugin.Args): hydra takes its remote
// shell as one path, with no arguments.
func linkMPI(dir string) error {
	for _, p := range []string{jobspec.MPIAgent, jobspec.MPISSHClient} {
		if err := link(dir, filepath.Base(p)); err != nil {
			return err
		}
	}
	return nil
}

// link makes dir's name a link to the binary, under a temporary name and renamed, as the
// binary is installed.
func link(dir, name string) error {
	tmp := filepath.Join(dir, "."+name+".tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(s3layout.StagerBinary), tmp); err != nil {
		return fmt.Errorf("linking %s: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("linking %s: %w", name, err)
	}
	return nil
}

// Install copies the file self into dir as kubectl-tao (mode 0755), atomically, and links the
// MPI launchers' remote shells to it.
func Install(self, dir string) (string, error) {
	dest := filepath.Join(dir, filepath.Base(s3layout.StagerBinary))
	src, err := os.Open(self)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", self, err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp(dir, ".kubectl-tao-*")
	if err != nil {
		return "", fmt.Errorf("installing into %s: %w", dir, err)
	}
	done := false
	defer func() {
		if !done {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return "", fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return "", fmt.Errorf("installing %s: %w", dest, err)
	}
	if err := linkMPI(dir); err != nil {
		return "", err
	}
	done = true
	return dest, nil
}

// newWorkdirCmd builds `stage workdir --to DIR (--archive FILE | --from-s3)`: the init
// container's unpacking of the --workdir snapshot, checked against $TAO_WORKDIR_SHA256 first.
func newWorkdirCmd(streams genericiooptions.IOStreams, getenv func(string) string) *cobra.Command {
	var to, archive string
	var fromS3 bool
	cmd := &cobra.Command{
		Use:   "workdir --to DIR (--archive FILE | --from-s3)",
		Short: "Unpack the job's --workdir snapshot into DIR, after checking its checksum ($" + s3layout.EnvWorkdirSHA256 + ")",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			want := getenv(s3layout.EnvWorkdirSHA256)
			switch {
			case to == "" || (archive == "") == !fromS3:
				return exitcode.Usagef("stage workdir needs --to and exactly one of --archive and --from-s3")
			case want == "":
				return exitcode.Usagef("$%s is empty: it names the snapshot to unpack", s3layout.EnvWorkdirSHA256)
			}
			if fromS3 {
				cleanup, err := fetchWorkdir(cmd.Context(), getenv, to, streams.ErrOut)
				if err != nil {
					return err
				}
				defer cleanup()
				archive = filepath.Join(to, workdirDownload)
			}
			sum, err := workdir.Unpack(archive, to, want)
			if err != nil {
				return err
			}
			fmt.Fprintf(streams.ErrOut, "workdir: unpacked %s into %s\n", sum, to)
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "directory to unpack into")
	cmd.Flags().StringVar(&archive, "archive", "", "the archive file (a mounted ConfigMap key)")
	cmd.Flags().BoolVar(&fromS3, "from-s3", false, "download the archive from s3://$"+s3layout.EnvBucket+"/results/$"+s3layout.EnvJobID+"/$"+s3layout.EnvJobUID+"/.kubectl-tao/"+s3layout.WorkdirArchive)
	return cmd
}

// workdirDownload is the archive's name inside DIR while it is unpacked: the init container's
// image is FROM scratch, DIR is the only writable place it has.
const workdirDownload = ".tao-stage-workdir.tar.zst"

// fetchWorkdir downloads the run's archive into dir; cleanup removes it again.
func fetchWorkdir(ctx context.Context, getenv func(string) string, dir string, log io.Writer) (func(), error) {
	cfg := s3.ConfigFromEnv(getenv)
	if err := cfg.Check(true, "the environment"); err != nil {
		return nil, err
	}
	key, err := s3layout.WorkdirKey(getenv(s3layout.EnvJobID), getenv(s3layout.EnvJobUID))
	if err != nil {
		return nil, exitcode.Usagef("$%s and $%s name the archive: %w", s3layout.EnvJobID, s3layout.EnvJobUID, err)
	}
	client, err := s3.NewClient(cfg, nil)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	dest := filepath.Join(dir, workdirDownload)
	s := &s3.Stager{Client: client, Log: log, Parallel: 1, Attempts: s3.DefaultAttempts, IdleTimeout: s3.DefaultIdleTimeout}
	cleanup := func() { _ = os.Remove(dest) }
	if err := s.Download(ctx, []s3layout.Input{{Path: dest, Source: s3layout.URL{Bucket: cfg.Bucket, Key: key}}}); err != nil {
		cleanup()
		return nil, err
	}
	return cleanup, nil
}
