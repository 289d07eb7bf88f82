// Package supervisor is what runs in a rank's container when the job needs more than its
// command: S3 inputs or outputs, kept checkpoints, a log archive. The container's entrypoint is
// the kubectl-tao binary the stager init container installed (`stage run -- COMMAND...`), and
// the user's command is its child, in a process group of its own. Run reads top to bottom as
// an attempt goes:
//
//  1. stage in: every input is downloaded. A stop during it ends the attempt 128+signal and
//     the command never runs; a failure ends it s3layout.ExitStageIn. Then, in an MPI job
//     (submit --launcher mpi), every pod serves the MPI agent; a pod other than rank 0's runs
//     nothing of its own until rank 0 says the world ended well (it exits 0) or it is stopped
//     (then lets the daemons its agent runs end within MPIStopWait, as mpirun ends them), and
//     rank 0 goes on to run the command (mpirun) once every other pod's agent answers
//     (s3layout.ExitStageRun, naming them, when they do not within MPIReach); once mpirun
//     succeeds, it tells the other pods so.
//  2. the command runs under the logarchive runner: its output passes through as it comes and
//     is kept in the rank's log archive; with --checkpoint-dir the checkpoints of every rank are
//     restored first (s3layout.ExitStageIn when they cannot be), kept while it runs and
//     flushed once it ends. A stop (SIGTERM, SIGINT) goes to the command's whole process group;
//     the group is killed when the command's share of the grace period is spent (Budget).
//  3. a stopped attempt is never done: it exits 128+signal whatever the command's code, so that
//     the Job retries it instead of recording its index complete, and its outputs are not the
//     run's results (stage out is skipped).
//  4. stage out, on rank 0 only (the result keys carry no rank), even when the command failed.
//  5. the exit code is the command's, or s3layout.ExitStageOut when it succeeded but its
//     outputs or last checkpoints were not uploaded (the results were lost: the Job must not
//     look Complete, and --retries must not rerun the training for an upload).
//
// An OOM kill of the container or the kubelet's SIGKILL at the end of the grace period takes
// the supervisor with it: nothing is uploaded then.
package supervisor

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/mpiagent"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/checkpoint"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/logarchive"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// Supervisor runs one attempt of one rank.
type Supervisor struct {
	// Argv is the command, its first element the program (a bash string arrives as
	// /bin/bash -c STRING).
	Argv           []string
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Signals are the stops the container gets (SIGTERM from the kubelet, SIGINT).
	Signals <-chan os.Signal
	// Getenv reads the pod's environment (submit's TAO_STAGE_* variables and the S3 Secret's).
	Getenv func(string) string
	// NoLogArchive keeps no log archive (submit --no-log-archive).
	NoLogArchive bool
	// Interval is how often the log archive is uploaded while the command runs.
	Interval time.Duration
	// Yield, when set, runs once the command has started: the uploads must never take the CPUs
	// that feed the GPUs (checkpoint.Yield in the pod).
	Yield func()
	// TerminationLog is where a hang's summary, or the MPI agents rank 0 never reached, is
	// left for diagnose (the kubelet's terminationMessagePath); "" leaves none.
	TerminationLog string
	// MPIReach bounds rank 0's wait for the other pods' MPI agents; 0 is DefaultMPIReach.
	MPIReach time.Duration
	// MPIStopWait bounds how long a stopped pod's MPI agent lets its commands end by
	// themselves; 0 is DefaultMPIStopWait.
	MPIStopWait time.Duration
	// MPIExitSettle is how long rank 0 waits after the other pods' supervisors ended; 0 is
	// DefaultMPIExitSettle.
	MPIExitSettle time.Duration
	// DialAgent connects to a host's MPI agent; nil is TCP to the job's agent port.
	DialAgent mpiagent.Dialer
	// MPISSHReach bounds rank 0's check that ssh reaches every pod of an mpi-ssh job; 0 is
	// DefaultMPISSHReach.
	MPISSHReach time.Duration
	// RunSSH runs `ssh HOST true` as an mpi-ssh job's launcher would; nil runs the job's ssh
	// client.
	RunSSH SSHRunner
	// SSHD is the sshd an mpi-ssh job's pod runs; "" looks for the image's.
	SSHD string

	stop  stops
	sayMu sync.Mutex
	// hang is set when the watchdog ended the command.
	hang *Hang
}

// plan is what the pod's environment asks of this attempt.
type plan struct {
	rank        int
	inputs      []s3layout.Input
	outputs     []string
	checkpoints *checkpoint.Config
	archive     logarchive.Upload
	budget      Phases
	s3          s3.Config
	watchdog    *hangConfig
	mpi         *mpiPlan
}

// Run runs the attempt and returns the container's exit code.
func (s *Supervisor) Run(ctx context.Context) int {
	s.stop.start(s.Signals)
	defer s.stop.end()
	p, err := s.plan()
	if err != nil {
		s.sayf("%v", err)
		return int(exitcode.Of(err))
	}

	// 1. stage in.
	if len(p.inputs) > 0 {
		err := s.stageIn(ctx, p)
		if sig := s.stop.signal(); sig != 0 {
			s.sayf("signalled during stage in: the command was not run")
			return 128 + int(sig)
		}
		if err != nil {
			s.sayf("stage in failed: %v: the command was not run", err)
			return s3layout.ExitStageIn
		}
	}

	// 1b. an MPI job: every pod serves the agent, once its inputs are in place; the other pods
	// run nothing of their own until rank 0 says its world ended or they are stopped, and
	// rank 0 starts the command (mpirun) only once every other pod's agent answers.
	if p.mpi != nil && p.rank != 0 {
		return s.serveWorker(ctx, p)
	}
	if p.mpi != nil {
		env := s.daemonEnv(nil)
		if p.mpi.sshPort != "" {
			// Rank 0 runs sshd too: MPICH's launcher reaches rank 0's own pod by ssh as well.
			d, err := s.startSSHD(p.mpi, env)
			if err != nil {
				s.sayf("%v", err)
				return s3layout.ExitStageRun
			}
			defer d.end(0)
			p.mpi.sshdGroup = d.cmd.Process.Pid
		}
		stopAgent, _, err := s.serveAgent(ctx, p.mpi, env)
		if err != nil {
			s.sayf("%v", err)
			return s3layout.ExitStageRun
		}
		defer stopAgent(0)
		err = s.waitWorkers(ctx, p.mpi)
		if err == nil && p.mpi.sshPort != "" {
			err = s.waitSSH(ctx, p.mpi.allHosts())
		}
		if err != nil {
			if sig := s.stop.signal(); sig != 0 {
				s.sayf("signalled while waiting for the other pods: the command was not run")
				return 128 + int(sig)
			}
			s.sayf("%v: the command was not run", err)
			// diagnose names the pods from here without reading the log.
			writeTerminationMessage(s.TerminationLog, err.Error())
			return s3layout.ExitStageRun
		}
	}

	// 2. the command, its checkpoints and its log, and the hang watchdog.
	var dog *watchdog
	if p.watchdog != nil {
		dog = newWatchdog(*p.watchdog, s.sayf)
		if err := dog.serve(); err != nil {
			s.sayf("%v", err)
			return s3layout.ExitStageRun
		}
		defer dog.close()
	}
	code, prepareErr, finished := s.runCommand(ctx, p, dog)

	// 3. a stopped attempt.
	if sig := s.stop.signal(); sig != 0 {
		return s.stopped(sig, code, prepareErr, finished, p)
	}
	if prepareErr != nil {
		s.sayf("%v", prepareErr)
		return int(exitcode.Of(prepareErr))
	}
	if s.hang != nil {
		if finished != nil {
			s.sayf("%v", finished)
		}
		// A hung attempt's outputs are not the run's results either.
		if len(p.outputs) > 0 && p.rank == 0 {
			s.sayf("stage out skipped: the outputs of a hung attempt are not the run's results")
		}
		s.sayf("the command was ended as hung (it exited %d): exiting %d, which --retries retries from the newest complete checkpoint", code, jobspec.ExitHang)
		return int(jobspec.ExitHang)
	}
	if p.mpi != nil && p.rank == 0 && code == int(jobspec.ExitOOM) {
		code = s.launcherKilled(code)
	}
	if finished != nil {
		s.sayf("%v", finished)
		if code == 0 {
			code = s3layout.ExitStageOut
		}
	}

	if p.mpi != nil && p.rank == 0 && code == 0 {
		s.finishWorkers(ctx, p.mpi)
	}

	// 4. stage out.
	if len(p.outputs) == 0 || p.rank != 0 {
		return code
	}
	if err := s.stageOut(ctx, p); err != nil {
		if code == 0 {
			s.sayf("stage out failed: %v: the command succeeded but its outputs were not uploaded", err)
			return s3layout.ExitStageOut
		}
		s.sayf("stage out failed after the command failed (exit code %d): %v", code, err)
	}
	// 5. the command's own code.
	return code
}

// plan reads the environment. A checkpoint setting it cannot use fails the attempt before
// anything runs (s3layout.ExitStageIn: an attempt that cannot restore would start over from
// step 0); a log archive that cannot be uploaded is a warning: the command must run
// regardless.
func (s *Supervisor) plan() (*plan, error) {
	p := &plan{s3: s3.ConfigFromEnv(s.Getenv)}
	rank, err := NodeRank(s.Getenv)
	if err != nil {
		return nil, exitcode.WithCode(s3layout.ExitStageRun, err)
	}
	p.rank = rank
	if p.inputs, err = s3layout.DecodeInputs(s.Getenv(s3layout.EnvInputs)); err != nil {
		return nil, exitcode.WithCode(s3layout.ExitStageIn, fmt.Errorf("$%s: %w", s3layout.EnvInputs, err))
	}
	if p.outputs, err = s3layout.DecodeOutputs(s.Getenv(s3layout.EnvOutputs)); err != nil {
		return nil, exitcode.WithCode(s3layout.ExitStageRun, fmt.Errorf("$%s: %w", s3layout.EnvOutputs, err))
	}
	if p.watchdog, err = hangFromEnv(s.Getenv, rank); err != nil {
		return nil, exitcode.WithCode(s3layout.ExitStageRun, err)
	}
	if p.mpi, err = mpiFromEnv(s.Getenv, rank); err != nil {
		return nil, exitcode.WithCode(s3layout.ExitStageRun, err)
	}
	grace, err := gracePeriod(s.Getenv)
	if err != nil {
		return nil, exitcode.WithCode(s3layout.ExitStageRun, err)
	}
	p.budget = Budget{Grace: grace}.Phases()
	if s.Getenv(s3layout.EnvStageCheckpointDir) != "" {
		c, err := checkpoint.FromEnv(s.Getenv, rank)
		if err != nil {
			return nil, exitcode.WithCode(s3layout.ExitStageIn, fmt.Errorf("checkpoints: %w", err))
		}
		p.checkpoints = &c
	}
	if !s.NoLogArchive {
		if p.archive, err = s.archiveTarget(p); err != nil {
			s.sayf("log archive: off: %v", err)
		}
	}
	return p, nil
}

// archiveTarget is the upload of this rank's archive.
func (s *Supervisor) archiveTarget(p *plan) (logarchive.Upload, error) {
	if err := p.s3.Check(true, "the environment"); err != nil {
		return nil, err
	}
	prefix, err := s3layout.ResultsPrefix(s.Getenv(s3layout.EnvJobID), s.Getenv(s3layout.EnvJobUID))
	if err != nil {
		return nil, err
	}
	client, err := s3.NewClient(p.s3, nil)
	if err != nil {
		return nil, err
	}
	// One object per attempt: a retried rank's new pod must not overwrite the last one's log.
	key := s3layout.LogArchiveKey(prefix, p.rank, s.Getenv(s3layout.EnvPodName))
	bucket := p.s3.Bucket
	return func(ctx context.Context, r io.ReaderAt, size int64) error {
		return s3.PutSnapshot(ctx, client, bucket, key, r, size)
	}, nil
}

// stageIn downloads every input; a stop cancels it at once (the command will not run).
func (s *Supervisor) stageIn(ctx context.Context, p *plan) error {
	if err := p.s3.Check(false, "the environment"); err != nil {
		return err
	}
	client, err := s3.NewClient(p.s3, nil)
	if err != nil {
		return err
	}
	ctx, cancel := s.untilStopped(ctx)
	defer cancel()
	st := &s3.Stager{Client: client, Log: s.Stderr}
	return st.Download(ctx, p.inputs)
}

// untilStopped is ctx, ended also by the pod's first stop.
func (s *Supervisor) untilStopped(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.stop.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// stageOut uploads every output below the run's results prefix. A stop during it lets it go on
// until the archive's deadline.
func (s *Supervisor) stageOut(ctx context.Context, p *plan) error {
	if err := p.s3.Check(true, "the environment"); err != nil {
		return err
	}
	run := s3.Run{Bucket: p.s3.Bucket, JobID: s.Getenv(s3layout.EnvJobID), JobUID: s.Getenv(s3layout.EnvJobUID)}
	if _, err := s3layout.ResultsPrefix(run.JobID, run.JobUID); err != nil {
		return fmt.Errorf("$%s and $%s name the results prefix: %w", s3layout.EnvJobID, s3layout.EnvJobUID, err)
	}
	client, err := s3.NewClient(p.s3, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	go func() {
		select {
		case <-s.stop.stopped:
			t := time.NewTimer(time.Until(s.stop.sinceStop(p.budget.Archive)))
			defer t.Stop()
			select {
			case <-t.C:
				cancel()
			case <-ctx.Done():
			}
		case <-ctx.Done():
		}
	}()
	st := &s3.Stager{Client: client, Log: s.Stderr}
	return st.Upload(ctx, run, p.outputs)
}

// runCommand runs the command under the log archive runner, with the checkpoints' restore
// before it and their last upload after it, and the hang watchdog beside it. It returns the
// command's code, the restore's error (the command not run) and the last upload's.
func (s *Supervisor) runCommand(ctx context.Context, p *plan, dog *watchdog) (code int, prepareErr, finished error) {
	hangKill := make(chan struct{})
	r := &logarchive.Runner{Argv: s.Argv, Stdin: s.Stdin, Stdout: s.Stdout, Stderr: s.Stderr,
		Signals: s.stop.forward, Kill: firstOf(s.stop.after(p.budget.Command), hangKill, s.stop.quit), Upload: p.archive, Interval: s.Interval, Log: s.Stderr,
		FinalDeadline: func() time.Time { return s.stop.deadline(p.budget.Archive) }}
	if p.archive != nil {
		// Unlinked at once: the file lives as long as this process holds it, and nothing else
		// in the container sees or has to clean it up.
		f, err := os.CreateTemp("", "kubectl-tao-log-*")
		if err == nil {
			_ = os.Remove(f.Name())
			defer f.Close()
			r.Archive = f
		} else {
			s.sayf("log archive: off: %v", err)
			r.Upload = nil
		}
	}
	// The supervisor's own lines of the attempt (the restore, the uploads, a hang and its
	// stacks) are in its archive too.
	notes := logarchive.NewNotes(s.Stderr)
	r.Notes = notes
	var sess *checkpoint.Session
	// Inside the runner, so that an attempt whose restore fails still leaves its archive.
	r.Prepare = func() ([]string, error) {
		env, err := prepareStacks(os.Environ())
		if err != nil {
			fmt.Fprintf(notes, "kubectl-tao: stacks on demand: off: %v\n", err)
		}
		env = append(env, rdzvConf(s.Getenv, p.rank)...)
		if p.checkpoints == nil {
			return env, nil
		}
		if sess, err = s.startCheckpoints(ctx, p, notes); err != nil {
			return nil, exitcode.WithCode(s3layout.ExitStageIn, err)
		}
		return append(env, sess.Env()...), nil
	}
	watching, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	watched := make(chan struct{})
	r.Started = func(pid int) {
		recordGroup(pid)
		if p.mpi != nil && p.mpi.sshdGroup > 0 {
			addGroup(p.mpi.sshdGroup)
		}
		if s.Yield != nil {
			s.Yield()
		}
		if dog == nil {
			close(watched)
			return
		}
		go func() {
			defer close(watched)
			if h := dog.watch(watching); h != nil {
				s.endHung(ctx, h, pid, notes, s.stop.forward, hangKill, p.budget, dog.tick()+2*time.Second)
			}
		}()
	}
	if dog != nil {
		r.Output = dog.alive
	}
	r.Ended = func() {
		stopWatching()
		s.stop.commandEnded(p.budget.Command)
		if sess != nil {
			finished = sess.Finish(ctx, s.stop.deadline(p.budget.Checkpoints))
		}
	}
	code, prepareErr = r.Run(ctx)
	if prepareErr == nil {
		<-watched
	}
	return code, prepareErr, finished
}

// startCheckpoints restores the checkpoints (p.checkpoints) and starts keeping this pod's.
func (s *Supervisor) startCheckpoints(ctx context.Context, p *plan, log io.Writer) (*checkpoint.Session, error) {
	c := p.checkpoints
	if c.OnVolume {
		return checkpoint.StartOnVolume(c.Target, s.Getenv(s3layout.EnvPodName), log)
	}
	return checkpoint.Start(ctx, c.Target, s.Getenv(s3layout.EnvPodName), c.Keep, log)
}

// endHung says the hang, dumps every Python process's stacks into the log, and ends the
// command: SIGTERM to its group, SIGKILL when a hung process does not go (one blocked in a
// collective cannot run its handler) within the command's share of the grace period, at most
// ten seconds. The other ranks see the hang within a tick of this one: the SIGTERM waits that
// long (and two seconds more), so that none of them is dumping a peer the end of this rank has
// already shaken out of its collective.
func (s *Supervisor) endHung(ctx context.Context, h *Hang, pgid int, notes io.Writer, signals chan os.Signal, kill chan struct{}, b Phases, settle time.Duration) {
	s.hang = h
	fmt.Fprintf(notes, "kubectl-tao: %s: dumping the stacks of every process of the command, then ending it (exit %d)\n", h.describe(), jobspec.ExitHang)
	dumped := time.Now()
	frames, err := DumpStacks(ctx, []int{pgid}, notes)
	if err != nil {
		fmt.Fprintf(notes, "kubectl-tao: %v\n", err)
	}
	msg := h.describe()
	if len(frames) > 0 {
		msg += "; this rank's innermost frames: " + summary(frames, 4)
	}
	writeTerminationMessage(s.TerminationLog, msg)
	select {
	case <-time.After(time.Until(dumped.Add(settle))):
	case <-ctx.Done():
	}
	select {
	case signals <- syscall.SIGTERM:
	default:
	}
	go func() {
		t := time.NewTimer(min(b.Command, 10*time.Second))
		defer t.Stop()
		select {
		case <-t.C:
			close(kill)
		case <-ctx.Done():
		}
	}()
}

// firstOf is closed when a or b is; its goroutine ends with quit, the supervisor's end.
func firstOf(a, b, quit <-chan struct{}) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		select {
		case <-a:
			close(out)
		case <-b:
			close(out)
		case <-quit:
		}
	}()
	return out
}

// stopped ends an attempt the pod was told to stop: 128+signal whatever the command's code,
// because an exit 0 would have the Job record the index as done, and retry it never.
func (s *Supervisor) stopped(sig syscall.Signal, code int, prepareErr, finished error, p *plan) int {
	name := signalName(sig)
	want := 128 + int(sig)
	switch {
	case prepareErr != nil:
		s.sayf("the pod was told to stop (%s) before the command ran: exiting %d (%v)", name, want, prepareErr)
		return want
	case finished != nil:
		s.sayf("%v", finished)
	}
	if code != want {
		s.sayf("the pod was told to stop (%s): the command exited %d; exiting %d so that this attempt does not count as done", name, code, want)
	}
	if len(p.outputs) > 0 && p.rank == 0 {
		s.sayf("stage out skipped: the outputs of a stopped attempt are not the run's results")
	}
	return want
}

func (s *Supervisor) sayf(format string, args ...any) {
	// The watchdog and the MPI agent say things from goroutines of their own.
	s.sayMu.Lock()
	defer s.sayMu.Unlock()
	fmt.Fprintf(s.Stderr, "kubectl-tao: "+format+"\n", args...)
}

func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	}
	return sig.String()
}

// NodeRank is the pod's rank: $NODE_RANK, which the Job sets on multi-node pods; a single-node
// pod has none and is rank 0.
func NodeRank(getenv func(string) string) (int, error) {
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

// gracePeriod is the pod's termination grace period as submit told it ($TAO_STAGE_GRACE_PERIOD,
// in seconds); 0 when it did not say.
func gracePeriod(getenv func(string) string) (time.Duration, error) {
	v := getenv(s3layout.EnvStageGracePeriod)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("$%s=%q: want a number of seconds, 1 or more", s3layout.EnvStageGracePeriod, v)
	}
	return time.Duration(n) * time.Second, nil
}

// stops tracks the pod's stop: every signal is forwarded to the command while it runs, and
// the phases' deadlines count from an anchor: the stop, or the command's end less the
// command's share when it ended by itself (see Budget).
type stops struct {
	mu     sync.Mutex
	stopAt time.Time
	anchor time.Time
	last   syscall.Signal
	// forward carries the signals to the command's runner.
	forward chan os.Signal
	// stopped is closed by the first stop.
	stopped chan struct{}
	quit    chan struct{}
	done    sync.WaitGroup
}

func (st *stops) start(in <-chan os.Signal) {
	st.forward = make(chan os.Signal, 4)
	st.stopped = make(chan struct{})
	st.quit = make(chan struct{})
	st.done.Add(1)
	go func() {
		defer st.done.Done()
		for {
			select {
			case sig := <-in:
				st.mu.Lock()
				first := st.stopAt.IsZero()
				if first {
					st.stopAt = time.Now()
					if st.anchor.IsZero() {
						st.anchor = st.stopAt
					}
				}
				if s, ok := sig.(syscall.Signal); ok {
					st.last = s
				}
				st.mu.Unlock()
				if first {
					close(st.stopped)
				}
				select {
				case st.forward <- sig:
				default:
				}
			case <-st.quit:
				return
			}
		}
	}()
}

func (st *stops) end() {
	close(st.quit)
	st.done.Wait()
}

// signal is the last stop signal, 0 when none came.
func (st *stops) signal() syscall.Signal {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.last
}

// commandEnded anchors the later phases at the command's end less its share, unless a stop
// anchored them already.
func (st *stops) commandEnded(share time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.anchor.IsZero() {
		st.anchor = time.Now().Add(-share)
	}
}

// deadline is offset after the anchor (after now when there is none yet).
func (st *stops) deadline(offset time.Duration) time.Time {
	st.mu.Lock()
	at := st.anchor
	st.mu.Unlock()
	if at.IsZero() {
		return time.Now().Add(offset)
	}
	return at.Add(offset)
}

// sinceStop is offset after the stop itself: what the kubelet allows from its SIGTERM.
func (st *stops) sinceStop(offset time.Duration) time.Time {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.stopAt.Add(offset)
}

// after is closed offset after the stop (never without one): the end of the command's share.
func (st *stops) after(offset time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		select {
		case <-st.stopped:
		case <-st.quit:
			return
		}
		t := time.NewTimer(time.Until(st.sinceStop(offset)))
		defer t.Stop()
		select {
		case <-t.C:
			close(ch)
		case <-st.quit:
		}
	}()
	return ch
}

// rdzvConf tells torchrun's agent of an elastic job whether it hosts the c10d store (index 0)
// or connects to it, added to the user's PET_RDZV_CONF unless it says is_host itself: torch
// would otherwise decide by matching the endpoint, the headless Service's name, against the
// pod's hostname, which never matches, and no agent would host it.
func rdzvConf(getenv func(string) string, rank int) []string {
	if getenv(jobspec.EnvPETRdzvBackend) != jobspec.ElasticRdzvBackend {
		return nil
	}
	conf := getenv(jobspec.EnvPETRdzvConf)
	// torch reads the conf as comma-separated key=value pairs (_parse_rendezvous_config).
	for _, kv := range strings.Split(conf, ",") {
		if k, _, _ := strings.Cut(kv, "="); strings.TrimSpace(k) == "is_host" {
			return nil
		}
	}
	if conf != "" {
		conf += ","
	}
	return []string{jobspec.EnvPETRdzvConf + "=" + conf + jobspec.RdzvHostConf(rank)}
}
