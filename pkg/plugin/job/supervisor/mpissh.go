package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/procgroup"
)

// In an mpi-ssh job (submit --launcher mpi-ssh) every pod's supervisor runs the image's sshd
// beside the agent, and rank 0's launcher reaches the pods with the image's ssh. The sshd runs
// with the job's host key and authorized key, and the settings a launch needs, given with -o
// over the image's sshd_config: the job's keys are mounted read-only where sshd's StrictModes
// cannot judge them (a Secret volume's directories), and PAM, which a container rarely has set
// up for sessions (pam_loginuid fails without CAP_AUDIT_CONTROL), is not needed for a login by
// key.

// sshdPaths are where the image's sshd is looked for when it is not on PATH (a non-root user's
// PATH rarely has sbin). sshd must run by an absolute path: it re-executes itself.
var sshdPaths = []string{"/usr/sbin/sshd", "/usr/local/sbin/sshd"}

// sshdPrivsepDir is Debian's and Ubuntu's sshd's privilege separation directory, which their
// service unit makes at boot and a container never boots.
const sshdPrivsepDir = "/run/sshd"

// DefaultMPISSHReach bounds rank 0's check that ssh reaches every pod, after every agent
// answered: each pod starts its sshd before its agent serves, so what fails after this long
// is the image's ssh setup, which waiting does not mend.
const DefaultMPISSHReach = time.Minute

// sshSessionEnv are the pod's variables an ssh session on it gets (sshd gives a session its own
// environment, not the pod's): the job's MPI settings but its key, and the pod's identity, for
// the daemons and the fork agent mpirun starts through it. The user's own variables reach
// the processes as under any ssh launch: mpirun's -x NAME.
func sshSessionEnv(getenv func(string) string) []string {
	var env []string
	names := []string{jobspec.EnvNodeRank, s3layout.EnvJobID}
	for _, n := range append(names, jobspec.MPIEnvNames()...) {
		if v := getenv(n); v != "" && n != jobspec.EnvMPIKey {
			env = append(env, n+"="+v)
		}
	}
	return env
}

// SSHDArgs are the arguments of an mpi-ssh job's sshd on port, after its path: in the
// foreground, its log on stderr (the pod's log, where a refused login is said), the job's host
// key, the job's key as the only one authorized, logins by key only, and env set in every
// session.
func SSHDArgs(port string, env []string) []string {
	args := []string{
		"-D", "-e", "-p", port,
		"-h", path.Join(jobspec.SSHDir, jobspec.SSHHostKeyFile),
		"-o", "AuthorizedKeysFile=" + path.Join(jobspec.MPIDir, jobspec.AuthorizedKeysKey),
		"-o", "StrictModes=no",
		"-o", "PubkeyAuthentication=yes",
		"-o", "PasswordAuthentication=no",
		"-o", "KbdInteractiveAuthentication=no",
		"-o", "PermitRootLogin=prohibit-password",
		"-o", "UsePAM=no",
		"-o", "PidFile=none",
	}
	if len(env) > 0 {
		quoted := make([]string, len(env))
		for i, kv := range env {
			quoted[i] = sshQuote(kv)
		}
		args = append(args, "-o", "SetEnv="+strings.Join(quoted, " "))
	}
	return args
}

// sshQuote quotes one word of an sshd_config line, as OpenSSH's argv_split reads it.
func sshQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// sshd is an mpi-ssh job's sshd in this pod.
type sshd struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
	stop   sync.Once
}

// startSSHD starts the image's sshd for the job on m's ssh port, its sessions given env.
func (s *Supervisor) startSSHD(m *mpiPlan, env []string) (*sshd, error) {
	bin, err := s.SSHD, error(nil)
	if bin == "" {
		bin, err = exec.LookPath("sshd")
	}
	if err != nil {
		for _, p := range sshdPaths {
			if fi, statErr := os.Stat(p); statErr == nil && !fi.IsDir() {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("--launcher mpi-ssh runs the image's sshd, and the image has none (not on PATH, nor at %s): install openssh-server in the image, or submit with --launcher mpi, which needs nothing in it", strings.Join(sshdPaths, ", "))
	}
	_ = os.MkdirAll(sshdPrivsepDir, 0o755)
	cmd := exec.Command(bin, SSHDArgs(m.sshPort, append(sshSessionEnv(s.Getenv), env...))...)
	// sshd's log is the pod's: this process's stderr, which sshd inherits when it is a file
	// (in a pod), or written in turn with what the supervisor says.
	log := s.Stderr
	if _, ok := s.Stderr.(*os.File); !ok {
		log = sayWriter{s}
	}
	cmd.Stdout, cmd.Stderr = log, log
	procgroup.Own(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the image's sshd (%s): %w", bin, err)
	}
	d := &sshd{cmd: cmd, exited: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		close(d.exited)
	}()
	return d, nil
}

// end stops sshd once the sessions it serves (mpirun's daemons, which mpirun on rank 0 ends)
// have ended, or wait has passed; what is left ends with the container.
func (d *sshd) end(wait time.Duration) {
	d.stop.Do(func() {
		deadline := time.Now().Add(wait)
		for time.Now().Before(deadline) && len(groupProcesses("/proc", d.cmd.Process.Pid)) > 1 {
			select {
			case <-d.exited:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		_ = procgroup.Signal(d.cmd.Process, os.Interrupt)
		select {
		case <-d.exited:
		case <-time.After(2 * time.Second):
			_ = procgroup.Signal(d.cmd.Process, os.Kill)
			<-d.exited
		}
	})
}

// ended says how sshd ended by itself.
func (d *sshd) ended() error {
	if d.err == nil {
		return errors.New("the image's sshd exited")
	}
	return fmt.Errorf("the image's sshd ended: %w", d.err)
}

// SSHUnreachableError names the hosts ssh did not reach, each with ssh's last words.
type SSHUnreachableError struct {
	Hosts []string
	Last  map[string]string
}

func (e *SSHUnreachableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ssh did not reach %d of the job's pods: ", len(e.Hosts))
	for i, h := range e.Hosts {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s (%s)", h, e.Last[h])
	}
	return b.String()
}

// SSHRunner runs `ssh HOST true` through the job's ssh client and returns its stderr.
type SSHRunner func(ctx context.Context, host string) (stderr string, err error)

// waitSSH checks, bounded, that the job's ssh logs in to every host of the hostfile (rank 0's
// own too: MPICH's launcher reaches it by ssh as well), as mpirun will.
func (s *Supervisor) waitSSH(ctx context.Context, hosts []string) error {
	run := s.RunSSH
	if run == nil {
		run = runSSH
	}
	bound := s.MPISSHReach
	if bound == 0 {
		bound = DefaultMPISSHReach
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	ctx, stop := s.untilStopped(ctx)
	defer stop()
	var (
		mu   sync.Mutex
		last = map[string]string{}
		wg   sync.WaitGroup
	)
	for _, h := range hosts {
		wg.Go(func() {
			for {
				out, err := run(ctx, h)
				mu.Lock()
				if err == nil {
					delete(last, h)
					mu.Unlock()
					return
				}
				last[h] = sshWords(out, err)
				mu.Unlock()
				select {
				case <-ctx.Done():
					return
				case <-time.After(mpiReachInterval):
				}
			}
		})
	}
	wg.Wait()
	if s.stop.signal() != 0 {
		return context.Canceled
	}
	var failed []string
	for _, h := range hosts {
		if _, ok := last[h]; ok {
			failed = append(failed, h)
		}
	}
	if len(failed) == 0 {
		s.sayf("ssh reaches every pod (%d): running the command", len(hosts))
		return nil
	}
	return fmt.Errorf("checked for %s: %w", bound, &SSHUnreachableError{Hosts: failed, Last: last})
}

// sshWords are ssh's last line on stderr, or how it failed.
func sshWords(stderr string, err error) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return l
	}
	return err.Error()
}

// runSSH runs `ssh HOST true` as the launcher would, through the job's ssh client.
func runSSH(ctx context.Context, host string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, jobspec.MPISSHClient, host, "true")
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	return stderr.String(), err
}

// sayWriter writes to the supervisor's stderr in turn with sayf.
type sayWriter struct{ s *Supervisor }

func (w sayWriter) Write(p []byte) (int, error) {
	w.s.sayMu.Lock()
	defer w.s.sayMu.Unlock()
	return w.s.Stderr.Write(p)
}

// allHosts are every pod's host, rank 0's first.
func (m *mpiPlan) allHosts() []string { return slices.Concat([]string{m.self}, m.workers) }
