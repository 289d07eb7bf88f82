package supervisor

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/mpiagent"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

func mpiSSHEnv(rank int, port string) map[string]string {
	env := mpiEnv(rank, port)
	env[jobspec.EnvLauncher], env[jobspec.EnvMPISSHPort] = "mpi-ssh", "29503"
	env[jobspec.EnvOMPIForkAgent] = jobspec.MPIProcAgent
	return env
}

// fakeSSHD is an sshd that writes its arguments, one a line, to the file args and then serves
// until it is signalled.
func fakeSSHD(t *testing.T) (path, args string) {
	t.Helper()
	dir := t.TempDir()
	path, args = filepath.Join(dir, "sshd"), filepath.Join(dir, "args")
	script := "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done >" + args + "\necho $$ >" + args + ".pid\nexec sleep 1000\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, args
}

func TestSSHDArgs(t *testing.T) {
	args := SSHDArgs("29503", []string{"NODE_RANK=1", `ODD=a "b" \c`})
	joined := strings.Join(args, " ")
	for _, want := range []string{
		"-D -e -p 29503 -h /tao-ssh/ssh_host_ed25519_key",
		"-o AuthorizedKeysFile=/tao-mpi/authorized_keys", "-o StrictModes=no", "-o PasswordAuthentication=no",
		"-o KbdInteractiveAuthentication=no", "-o PermitRootLogin=prohibit-password", "-o UsePAM=no", "-o PidFile=none",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("sshd's arguments lack %q: %q", want, args)
		}
	}
	// One SetEnv, each variable a word as OpenSSH's argv_split reads it back.
	if got := args[len(args)-1]; got != `SetEnv="NODE_RANK=1" "ODD=a \"b\" \\c"` {
		t.Errorf("SetEnv: %s", got)
	}
	if slices.Contains(SSHDArgs("22", nil), "SetEnv=") {
		t.Error("an empty SetEnv")
	}
}

// A session gets the job's MPI settings and the pod's identity, never the agent key.
func TestSSHSessionEnv(t *testing.T) {
	env := mpiSSHEnv(1, "29502")
	env["SECRET_TOKEN"] = "hunter2"
	got := sshSessionEnv(func(k string) string { return env[k] })
	for _, want := range []string{"NODE_RANK=1", "TAO_JOB_ID=j", "TAO_LAUNCHER=mpi-ssh", "TAO_MPI_SSH_PORT=29503",
		"OMPI_MCA_orte_fork_agent=/tao-stager/kubectl-tao stage mpi-proc"} {
		if !slices.Contains(got, want) {
			t.Errorf("session env %q lacks %q", got, want)
		}
	}
	for _, kv := range got {
		if strings.Contains(kv, mpiKey) || strings.Contains(kv, "hunter2") {
			t.Errorf("session env carries %q", kv)
		}
	}
}

// A worker of an mpi-ssh job runs sshd (the job's settings, the session env) beside the agent,
// whose commands it refuses; told the world ended, it stops sshd and exits 0.
func TestMPISSHWorker(t *testing.T) {
	port := freePort(t)
	sshd, args := fakeSSHD(t)
	var sshdPID int
	a := superviseWith(t, mpiSSHEnv(1, port), "true", func(chan<- os.Signal) {
		conn := dialAgent(t, port)
		code, err := mpiagent.Run(context.Background(), conn, []byte(mpiKey), mpiagent.Request{Argv: []string{"echo", "ran"}}, os.Stderr, os.Stderr)
		if err == nil && code == 0 {
			t.Error("an mpi-ssh job's agent ran a command")
		}
		sshdPID = sshdOf(t, args)
		b, _ := os.ReadFile(args)
		if !strings.Contains(string(b), "-p\n29503\n") || !strings.Contains(string(b), `"TAO_LAUNCHER=mpi-ssh"`) ||
			!strings.Contains(string(b), `"`+mpiagent.EnvLogPID+"=") {
			t.Errorf("sshd's arguments:\n%s", b)
		}
		if err := mpiagent.Finish(context.Background(), func(ctx context.Context, _ string) (net.Conn, error) {
			return dialAgent(t, port), nil
		}, []byte(mpiKey), []string{"j-0.j"}); err != nil {
			t.Error(err)
		}
	}, func(s *Supervisor) { s.SSHD = sshd })
	if a.code != 0 || !strings.Contains(a.stderr, "rank 1 serves sshd (and the MPI agent) for rank 0's launcher") {
		t.Errorf("exit %d, stderr:\n%s", a.code, a.stderr)
	}
	if sshdPID > 0 && alive(sshdPID) {
		t.Errorf("sshd (pid %d) outlived the pod's supervisor", sshdPID)
	}
}

// sshdOf waits for the fake sshd to have written its arguments and returns its PID.
func sshdOf(t *testing.T, args string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(args + ".pid"); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the fake sshd never started")
	return 0
}

// alive reports whether the process pid exists.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// Rank 0 of an mpi-ssh job runs the command only once ssh reaches every pod, its own too; a pod
// ssh never reaches is named with ssh's own words, and the command never runs.
func TestMPISSHRank0ChecksSSH(t *testing.T) {
	reachable := func(_ context.Context, host string) (net.Conn, error) {
		client, server := net.Pipe()
		go (&mpiagent.Server{Key: []byte(mpiKey), Done: func() {}}).ServeConn(context.Background(), server)
		return client, nil
	}
	t.Run("reached", func(t *testing.T) {
		dir := t.TempDir()
		sshd, _ := fakeSSHD(t)
		var mu sync.Mutex
		tries := map[string]int{}
		a := superviseWith(t, mpiSSHEnv(0, freePort(t)), "touch "+filepath.Join(dir, "ran"), nil, func(s *Supervisor) {
			s.SSHD, s.MPIExitSettle = sshd, time.Millisecond
			s.DialAgent = func(ctx context.Context, host string) (net.Conn, error) {
				// The worker's supervisor is gone once told the world ended.
				if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
					return nil, errors.New("gone")
				}
				return reachable(ctx, host)
			}
			s.RunSSH = func(_ context.Context, host string) (string, error) {
				mu.Lock()
				defer mu.Unlock()
				// The worker's sshd answers at the second try.
				if tries[host]++; host == "j-1.j" && tries[host] < 2 {
					return "ssh: connect to host j-1.j port 29503: Connection refused\n", errors.New("exit status 255")
				}
				return "", nil
			}
		})
		if a.code != 0 || tries["j-0.j"] != 1 || tries["j-1.j"] != 2 {
			t.Errorf("exit %d after ssh tries %v: want 0, rank 0's own pod once and the worker's twice; stderr:\n%s", a.code, tries, a.stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "ran")); err != nil {
			t.Error("rank 0 did not run the command")
		}
	})
	t.Run("refused", func(t *testing.T) {
		dir := t.TempDir()
		sshd, _ := fakeSSHD(t)
		msg := filepath.Join(dir, "termination-log")
		a := superviseWith(t, mpiSSHEnv(0, freePort(t)), "touch "+filepath.Join(dir, "ran"), nil, func(s *Supervisor) {
			s.SSHD, s.MPISSHReach, s.TerminationLog, s.DialAgent = sshd, 300*time.Millisecond, msg, reachable
			s.RunSSH = func(_ context.Context, host string) (string, error) {
				if host == "j-1.j" {
					return "Warning: something\nroot@j-1.j: Permission denied (publickey).\n", errors.New("exit status 255")
				}
				return "", nil
			}
		})
		want := "checked for 300ms: ssh did not reach 1 of the job's pods: j-1.j (root@j-1.j: Permission denied (publickey).)"
		if a.code != s3layout.ExitStageRun || !strings.Contains(a.stderr, want+": the command was not run") {
			t.Errorf("exit %d, stderr: %q", a.code, a.stderr)
		}
		if b, _ := os.ReadFile(msg); string(b) != want {
			t.Errorf("termination message %q, want %q", b, want)
		}
		if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
			t.Error("rank 0 ran the command without ssh to its workers")
		}
	})
}

// A worker whose sshd ends by itself can no longer take part: it says so and fails.
func TestMPISSHWorkerSSHDEnds(t *testing.T) {
	dir := t.TempDir()
	sshd := filepath.Join(dir, "sshd")
	if err := os.WriteFile(sshd, []byte("#!/bin/sh\necho 'sshd: no hostkeys available -- exiting.' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := superviseWith(t, mpiSSHEnv(1, freePort(t)), "true", nil, func(s *Supervisor) { s.SSHD = sshd })
	if a.code != s3layout.ExitStageRun || !strings.Contains(a.stderr, "sshd: no hostkeys available -- exiting.\n") ||
		!strings.Contains(a.stderr, "the image's sshd ended: exit status 1: this pod can no longer be reached by rank 0's launcher") {
		t.Errorf("exit %d, stderr:\n%s", a.code, a.stderr)
	}
}

// An image without sshd fails the pod at once, saying what to do.
func TestMPISSHNoSSHD(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	was := sshdPaths
	sshdPaths = []string{filepath.Join(t.TempDir(), "sshd")}
	defer func() { sshdPaths = was }()
	for _, rank := range []int{0, 1} {
		a := supervise(t, mpiSSHEnv(rank, freePort(t)), "true", nil)
		if a.code != s3layout.ExitStageRun || !strings.Contains(a.stderr, "--launcher mpi-ssh runs the image's sshd, and the image has none") ||
			!strings.Contains(a.stderr, "or submit with --launcher mpi, which needs nothing in it") {
			t.Errorf("rank %d: exit %d, stderr:\n%s", rank, a.code, a.stderr)
		}
	}
}
