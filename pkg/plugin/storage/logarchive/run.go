package logarchive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/procgroup"
)

// Defaults of a Runner.
const (
	// DefaultInterval is how often the archive is uploaded while the command runs: a lost node
	// loses at most this much of the log.
	DefaultInterval = time.Minute
	// DefaultFinalTimeout bounds the upload after the command ends when the caller gives no
	// FinalDeadline (the supervisor gives one, from its grace budget).
	DefaultFinalTimeout = 15 * time.Second
	// drainDelay is how long output is still read after the command exited, when something it
	// started in the background keeps its stdout or stderr open: the pod must still end.
	drainDelay = 2 * time.Second
)

// Upload stores the first size bytes of r as the archive, replacing the previous upload (S3
// objects cannot be appended to).
type Upload func(ctx context.Context, r io.ReaderAt, size int64) error

// Runner runs one command as the staged container's wrapper needs it: the command's stdout and
// stderr go to Stdout and Stderr as they arrive (no line buffering: `logs -f` sees the bytes as
// soon as the command writes them) and into the archive file; signals are forwarded to the
// command; the archive is uploaded every Interval while the command runs and once after it ends,
// whatever the way it ended.
type Runner struct {
	Argv           []string
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Signals are forwarded to the command's process group (SIGTERM and SIGINT from the
	// supervisor): torchrun's workers get them as the launcher does.
	Signals <-chan os.Signal
	// Kill, when closed, kills the command's whole process group: the end of the time the
	// command has to stop.
	Kill <-chan struct{}
	// Output, when set, is called with the time of every write the command makes to stdout or
	// stderr (the hang watchdog's sign of life).
	Output func(time.Time)
	// Archive is the file the log is kept in; nil runs the command without an archive.
	Archive *os.File
	// Prepare, when set, runs once the archive is open and before the command starts (the
	// checkpoints' restore), and returns what to add to the command's environment (the
	// wrapper's own variables). When it fails the command is not run: its error goes in the
	// archive, which is uploaded all the same, so that the attempt shows in `logs --attempt`
	// and is counted as the next attempt counts them; Run returns the error for the caller.
	Prepare func() (env []string, err error)
	// Started, when set, runs once the command has started, with its pid, which is also its
	// process group's id (the supervisor lowers its own priority then, which the command must
	// not inherit, and starts watching it).
	Started func(pid int)
	// Ended, when set, runs once the command has ended, before the archive's final upload
	// (the checkpoints are flushed first: they matter most within the grace period).
	Ended func()
	// Upload, when set, stores the archive (Archive must be set).
	Upload       Upload
	Interval     time.Duration
	FinalTimeout time.Duration
	// FinalDeadline, when set, bounds the final upload instead of FinalTimeout: the
	// supervisor's grace budget decides it once the command has ended.
	FinalDeadline func() time.Time
	// Notes, when set, are copied into the archive from before the command starts until after
	// Ended (the checkpoints' restore and last upload are said in the attempt's archive).
	Notes *Notes
	// Log receives the runner's own warnings, one line each (the container's stderr): an archive
	// that cannot be written or uploaded never changes the command's exit code.
	Log io.Writer
	// Signalled is set by Run to the last signal it forwarded to the command, nil when none:
	// the caller decides what a stopped command's exit code means.
	Signalled os.Signal
}

// tee passes bytes to out at once and copies them into the archive stream.
type tee struct {
	out     io.Writer
	archive io.Writer
	output  func(time.Time)
}

func (t tee) Write(p []byte) (int, error) {
	if t.output != nil {
		t.output(time.Now())
	}
	n, err := t.out.Write(p)
	if t.archive != nil {
		_, _ = t.archive.Write(p)
	}
	return n, err
}

// Run runs the command to its end and returns its exit code as a shell reports it: the
// command's own, 128+N when signal N ended it, 127 when it cannot be found and 126 when it
// cannot be executed; or Prepare's error, the command not run. ctx only bounds the uploads
// while the command runs; the final upload happens even when ctx is done (a SIGTERM cancels
// it, and that is exactly when it matters).
func (r *Runner) Run(ctx context.Context) (int, error) {
	var arch *Writer
	if r.Archive != nil {
		arch = NewWriter(r.Archive)
		if r.Notes != nil {
			r.Notes.open(arch.Stream())
		}
	}
	var env []string
	if r.Prepare != nil {
		var err error
		if env, err = r.Prepare(); err != nil {
			if arch != nil {
				_, _ = fmt.Fprintf(arch.Stream(), "kubectl-tao: %v\n", err)
			}
			r.finish(ctx, arch)
			return 0, err
		}
	}
	cmd := exec.Command(r.Argv[0], r.Argv[1:]...)
	cmd.Stdin = r.Stdin
	cmd.Stdout = tee{out: r.Stdout, archive: archiveStream(arch), output: r.Output}
	cmd.Stderr = tee{out: r.Stderr, archive: archiveStream(arch), output: r.Output}
	cmd.WaitDelay = drainDelay
	procgroup.Own(cmd)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	if err := cmd.Start(); err != nil {
		code := startFailure(err)
		line := fmt.Sprintf("kubectl-tao: %s: %v\n", r.Argv[0], err)
		_, _ = io.WriteString(r.Stderr, line)
		if arch != nil {
			_, _ = arch.Stream().Write([]byte(line))
		}
		r.ended()
		r.finish(ctx, arch)
		return code, nil
	}

	if r.Started != nil {
		r.Started(cmd.Process.Pid)
	}
	exited, forwarded := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(forwarded)
		for {
			select {
			case sig := <-r.Signals:
				r.Signalled = sig
				_ = procgroup.Signal(cmd.Process, sig)
			case <-r.Kill:
				_ = procgroup.Signal(cmd.Process, os.Kill)
				r.Kill = nil
			case <-exited:
				return
			}
		}
	}()
	var periodic sync.WaitGroup
	if arch != nil && r.Upload != nil {
		periodic.Add(1)
		go func() {
			defer periodic.Done()
			r.refresh(ctx, arch, exited)
		}()
	}
	err := cmd.Wait()
	close(exited)
	// Signalled is read once Run returns: the forwarder must be done writing it.
	<-forwarded
	periodic.Wait()
	// err is also set when only the drain delay ran out; the process state has the outcome.
	_ = err
	code := exitCode(cmd.ProcessState)
	r.ended()
	r.finish(ctx, arch)
	return code, nil
}

func archiveStream(w *Writer) io.Writer {
	if w == nil {
		return nil
	}
	return w.Stream()
}

// refresh uploads the archive every Interval while it grows, until done.
func (r *Runner) refresh(ctx context.Context, arch *Writer, done <-chan struct{}) {
	interval := r.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var uploaded int64 = -1
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		size := arch.Size()
		if size == uploaded {
			continue
		}
		// One interval at most: a stalled upload must not hold back the next one.
		uctx, cancel := context.WithTimeout(ctx, interval)
		err := r.Upload(uctx, r.Archive, size)
		cancel()
		if err != nil {
			r.warnf("kubectl-tao: log archive: upload failed (retried in %s): %v", interval, err)
			continue
		}
		uploaded = size
	}
}

func (r *Runner) ended() {
	if r.Ended != nil {
		r.Ended()
	}
}

// finish archives the last unfinished lines and uploads the whole archive.
func (r *Runner) finish(ctx context.Context, arch *Writer) {
	if r.Notes != nil {
		r.Notes.close()
	}
	if arch == nil {
		return
	}
	if err := arch.Close(); err != nil {
		r.warnf("kubectl-tao: log archive: writing it failed, it holds only the first %d bytes: %v", arch.Size(), err)
	}
	if r.Upload == nil {
		return
	}
	timeout := r.FinalTimeout
	if timeout <= 0 {
		timeout = DefaultFinalTimeout
	}
	deadline := time.Now().Add(timeout)
	if r.FinalDeadline != nil {
		deadline = r.FinalDeadline()
	}
	uctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	if err := r.Upload(uctx, r.Archive, arch.Size()); err != nil {
		r.warnf("kubectl-tao: log archive: the final upload failed: %v", err)
	}
}

func (r *Runner) warnf(format string, args ...any) {
	if r.Log != nil {
		_, _ = fmt.Fprintf(r.Log, format+"\n", args...)
	}
}

// startFailure is the code a shell gives a command it cannot start.
func startFailure(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return 127
	}
	return 126
}

// exitCode is the command's code as a shell reports it: 128+N for a signal.
func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return 1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if code := ps.ExitCode(); code >= 0 {
		return code
	}
	return 1
}
