package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/mpiagent"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/checkpoint"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// DefaultMPIReach bounds rank 0's wait for every other pod's MPI agent before the command
// (mpirun) starts: the pods of one Job start together, unless one waits for a node or an image.
const DefaultMPIReach = 10 * time.Minute

// mpiReachInterval is how often rank 0 asks again an agent that did not answer.
const mpiReachInterval = time.Second

// mpiPlan is an MPI job's part of a pod's attempt (submit --launcher mpi): every pod serves
// the agent, and rank 0 runs the command once every other pod's agent answers.
type mpiPlan struct {
	key  []byte
	port string
	rank int
	// self is rank 0's own host, and workers the other pods' hosts, on rank 0.
	self    string
	workers []string
	// sshPort is where the pod's sshd listens in an mpi-ssh job, "" in any other.
	sshPort string
	// sshdGroup is the process group of rank 0's sshd, whose sessions run processes of the job.
	sshdGroup int
}

// mpiFromEnv reads an MPI job's settings; nil for any other job.
func mpiFromEnv(getenv func(string) string, rank int) (*mpiPlan, error) {
	launcher := jobspec.Launcher(getenv(jobspec.EnvLauncher))
	if !jobspec.IsMPI(launcher) {
		return nil, nil
	}
	p := &mpiPlan{key: []byte(getenv(jobspec.EnvMPIKey)), port: getenv(jobspec.EnvMPIAgentPort), rank: rank}
	if len(p.key) == 0 || p.port == "" {
		return nil, fmt.Errorf("an MPI job's pod without $%s or $%s", jobspec.EnvMPIKey, jobspec.EnvMPIAgentPort)
	}
	if launcher == jobspec.LauncherMPISSH {
		if p.sshPort = getenv(jobspec.EnvMPISSHPort); p.sshPort == "" {
			return nil, fmt.Errorf("an mpi-ssh job's pod without $%s", jobspec.EnvMPISSHPort)
		}
	}
	if rank != 0 {
		return p, nil
	}
	job := getenv(s3layout.EnvJobID)
	nodes, err := strconv.Atoi(getenv(jobspec.EnvNNodes))
	if err != nil || nodes < 1 || job == "" {
		return nil, fmt.Errorf("an MPI job's pod without the job's name ($%s) and size ($%s)", s3layout.EnvJobID, jobspec.EnvNNodes)
	}
	p.self = jobspec.PodHost(job, 0)
	for i := 1; i < nodes; i++ {
		p.workers = append(p.workers, jobspec.PodHost(job, i))
	}
	return p, nil
}

// DefaultMPIStopWait bounds how long a stopped pod's agent lets the commands it runs (mpirun's
// daemons) go on before it kills them: a cancel stops every pod at once, and mpirun on rank 0
// ends its daemons itself, where a daemon killed under it during its own teardown has crashed
// OpenMPI 4.1's mpirun.
const DefaultMPIStopWait = 10 * time.Second

// serveAgent serves the MPI agent on the job's agent port until the returned stop: commands run
// in the pod's own environment, and a connection with another key is refused and said in the
// pod's log. stop takes no new connections, lets the running commands end by themselves for up
// to wait, then kills what is left.
//
// finished is closed once rank 0's supervisor says the launcher's world ended well.
//
// env is what the daemons get beside the pod's environment (daemonEnv). In an mpi-ssh job the
// agent runs nothing: the launcher reaches the pods by ssh, and the agent only answers rank 0.
func (s *Supervisor) serveAgent(ctx context.Context, m *mpiPlan, env []string) (stop func(wait time.Duration), finished <-chan struct{}, err error) {
	ln, err := net.Listen("tcp", ":"+m.port)
	if err != nil {
		return nil, nil, fmt.Errorf("serving the MPI agent: %w", err)
	}
	done := make(chan struct{})
	var once sync.Once
	run := mpiagent.ShellExec(append(os.Environ(), env...), addGroup)
	if m.sshPort != "" {
		run = func(context.Context, mpiagent.Request, io.Writer, io.Writer) (int, error) {
			return 0, errors.New("an mpi-ssh job's agent runs no command: its launcher reaches the pods by ssh")
		}
	}
	srv := &mpiagent.Server{Key: m.key, Exec: run, Logf: s.sayf,
		Done: func() { once.Do(func() { close(done) }) }}
	ctx, kill := context.WithCancel(ctx)
	var closing atomic.Bool
	served := make(chan struct{})
	go func() {
		defer close(served)
		// Serve returns once the listener is closed and every connection has ended.
		if err := srv.Serve(ctx, ln); err != nil && !closing.Load() {
			s.sayf("the MPI agent stopped serving: %v", err)
		}
	}()
	return func(wait time.Duration) {
		closing.Store(true)
		_ = ln.Close()
		if wait > 0 {
			t := time.NewTimer(wait)
			defer t.Stop()
			select {
			case <-served:
			case <-t.C:
				s.sayf("the commands the MPI agent runs did not end within %s of the stop: killing them", wait)
			}
		}
		kill()
		<-served
	}, done, nil
}

// daemonEnv is what the commands mpirun runs in this pod (its daemons, and their processes)
// get beside the pod's environment: extra, this process's PID, whose streams are the pod's log
// that the fork agent points the processes' output at, and the settings that have Python
// processes dump their stacks on demand, since they are the job's in this pod for `kubectl tao
// stacks` (on rank 0's too: MPICH's mpiexec starts its local proxy through the launcher).
func (s *Supervisor) daemonEnv(extra []string) []string {
	env := append(slices.Clone(extra), mpiagent.EnvLogPID+"="+strconv.Itoa(os.Getpid()))
	if stacks, err := prepareStacks(append(os.Environ(), env...)); err == nil {
		env = append(env, stacks...)
	} else {
		s.sayf("stacks on demand: off: %v", err)
	}
	return env
}

// DefaultMPIFinish bounds how long rank 0 tries to tell the other pods' agents that its world
// ended well; the Job ends the pods it could not tell once rank 0's pod succeeds.
const DefaultMPIFinish = 10 * time.Second

// finishWorkers tells every other pod's agent that the world ended well, so that those pods
// succeed by themselves and keep their logs (the Job controller deletes the pods it ends).
//
// Rank 0's own success makes the Job controller end every pod not yet done, and it deletes
// them, logs and all: so rank 0 returns only once each agent it told has stopped answering
// (its supervisor is ending) and then MPIExitSettle more, the time a kubelet takes to report a
// pod's end.
func (s *Supervisor) finishWorkers(ctx context.Context, m *mpiPlan) {
	if len(m.workers) == 0 {
		return
	}
	bound := DefaultMPIFinish + s.mpiStopWait()
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	if err := mpiagent.Finish(ctx, s.dialer(m), m.key, m.workers); err != nil {
		s.sayf("could not tell every other pod that the MPI world ended (the Job ends them instead): %v", err)
		return
	}
	if err := mpiagent.WaitGone(ctx, s.dialer(m), m.key, m.workers, mpiReachInterval/10); err != nil {
		s.sayf("the other pods did not end within %s of being told (the Job ends them instead): %v", bound, err)
		return
	}
	settle := s.MPIExitSettle
	if settle == 0 {
		settle = DefaultMPIExitSettle
	}
	select {
	case <-ctx.Done():
	case <-time.After(settle):
	}
}

// DefaultMPIExitSettle is how long rank 0 waits, once the other pods' supervisors have ended,
// before it ends too: a kubelet reports a container's end within about a second (its relist
// period), and a pod reported Succeeded is one the Job controller leaves in place.
const DefaultMPIExitSettle = 2 * time.Second

// waitWorkers waits, bounded, until every other pod's agent answers with the job's key; a
// stop ends the wait.
func (s *Supervisor) waitWorkers(ctx context.Context, m *mpiPlan) error {
	if len(m.workers) == 0 {
		return nil
	}
	bound := s.MPIReach
	if bound == 0 {
		bound = DefaultMPIReach
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	ctx, stop := s.untilStopped(ctx)
	defer stop()
	start := time.Now()
	err := mpiagent.WaitReachable(ctx, s.dialer(m), m.key, m.workers, mpiReachInterval)
	var unreachable *mpiagent.UnreachableError
	if errors.As(err, &unreachable) && s.stop.signal() == 0 {
		return fmt.Errorf("waited %s for every pod's MPI agent: %w", bound, err)
	}
	if err == nil {
		// How long the launcher waited for its workers, in the log where a slow start is looked for.
		next := "running the command"
		if m.sshPort != "" {
			next = "checking that ssh reaches every pod"
		}
		s.sayf("the MPI agent of every other pod (%d) answered after %s: %s", len(m.workers), time.Since(start).Round(100*time.Millisecond), next)
	}
	return err
}

// dialer connects to a host's agent: DialAgent, or TCP to the job's agent port.
func (s *Supervisor) dialer(m *mpiPlan) mpiagent.Dialer {
	if s.DialAgent != nil {
		return s.DialAgent
	}
	d := net.Dialer{Timeout: mpiReachInterval * 5}
	return func(ctx context.Context, host string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", net.JoinHostPort(host, m.port))
	}
}

// launcherKilled is the exit code of rank 0 when mpirun exits 137, which OpenMPI's mpirun does
// when any process it started, on this pod or another, was killed with SIGKILL. The pod
// failure policy reads 137 of the training container as its own OOM kill and fails the job at
// once; mpirun's 137 says nothing of the kind, so it becomes 1, which counts against --retries
// and starts the MPI world again. A worker's container the kernel killed for memory fails as
// that pod's own 137, which the policy still sees.
func (s *Supervisor) launcherKilled(code int) int {
	s.sayf("the launcher exited %d: a process it started, here or on another pod, was killed (SIGKILL); exiting 1, a failure --retries may retry, since %d would read as this container's own OOM kill", code, code)
	return 1
}

// mpiStopWait is MPIStopWait, or its default.
func (s *Supervisor) mpiStopWait() time.Duration {
	if s.MPIStopWait == 0 {
		return DefaultMPIStopWait
	}
	return s.MPIStopWait
}

// serveWorker is an MPI job's attempt on a pod other than rank 0's: the pod's checkpoints are
// restored and kept as a torchrun rank's are, for the processes rank 0's mpirun starts here
// (their environment says where, through the agent's or sshd's), and the agent serves (and in
// an mpi-ssh job sshd, started first) until rank 0 says its world ended well (exit 0, the last
// checkpoints uploaded) or the pod is stopped.
func (s *Supervisor) serveWorker(ctx context.Context, p *plan) int {
	var sess *checkpoint.Session
	var env []string
	if p.checkpoints != nil {
		var err error
		if sess, err = s.startCheckpoints(ctx, p, s.Stderr); err != nil {
			s.sayf("%v: the MPI agent was not started", err)
			return s3layout.ExitStageIn
		}
		env = sess.Env()
	}
	env = s.daemonEnv(env)
	fail := func(err error) int {
		s.sayf("%v", err)
		if sess != nil {
			_ = sess.Finish(ctx, time.Now())
		}
		return s3layout.ExitStageRun
	}
	// sshd starts before the agent serves: rank 0 waits for the agents, then for ssh.
	var d *sshd
	var sshdExited <-chan struct{}
	if p.mpi.sshPort != "" {
		var err error
		if d, err = s.startSSHD(p.mpi, env); err != nil {
			return fail(err)
		}
		addGroup(d.cmd.Process.Pid)
		sshdExited = d.exited
		defer d.end(0)
	}
	stopAgent, worldEnded, err := s.serveAgent(ctx, p.mpi, env)
	if err != nil {
		return fail(err)
	}
	how := "the MPI agent"
	if d != nil {
		how = "sshd (and the MPI agent)"
	}
	s.sayf("rank %d serves %s for rank 0's launcher until the job ends", p.rank, how)
	code := 0
	select {
	case <-worldEnded:
		// A pod that ends by itself keeps its log, with its processes' output in it.
		s.sayf("rank 0's launcher ended its MPI world well: this pod is done")
		stopAgent(s.mpiStopWait())
	case <-s.stop.stopped:
		// mpirun, stopped on rank 0 at the same time, ends the daemons it started here.
		stopAgent(s.mpiStopWait())
		if d != nil {
			d.end(s.mpiStopWait())
		}
		code = 128 + int(s.stop.signal())
	case <-sshdExited:
		stopAgent(0)
		return fail(fmt.Errorf("%v: this pod can no longer be reached by rank 0's launcher", d.ended()))
	case <-ctx.Done():
		stopAgent(0)
		return s3layout.ExitStageRun
	}
	if sess != nil {
		if err := sess.Finish(ctx, s.stop.deadline(p.budget.Checkpoints)); err != nil {
			s.sayf("%v", err)
			if code == 0 {
				code = s3layout.ExitStageOut
			}
		}
	}
	return code
}
