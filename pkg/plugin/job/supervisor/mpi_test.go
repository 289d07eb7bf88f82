package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/mpiagent"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

const mpiKey = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestMPIFromEnv(t *testing.T) {
	mpi := map[string]string{jobspec.EnvLauncher: "mpi", jobspec.EnvMPIKey: mpiKey, jobspec.EnvMPIAgentPort: "29502",
		s3layout.EnvJobID: "j", jobspec.EnvNNodes: "3"}
	without := func(k string) map[string]string {
		m := map[string]string{}
		for key, v := range mpi {
			if key != k {
				m[key] = v
			}
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		rank    int
		want    *mpiPlan
		wantErr string
	}{
		{name: "a torchrun job", env: map[string]string{jobspec.EnvNNodes: "3"}},
		{name: "rank 0", env: mpi, want: &mpiPlan{key: []byte(mpiKey), port: "29502", self: "j-0.j", workers: []string{"j-1.j", "j-2.j"}}},
		{name: "another rank", env: mpi, rank: 2, want: &mpiPlan{key: []byte(mpiKey), port: "29502", rank: 2}},
		{name: "one pod", env: func() map[string]string { m := without(jobspec.EnvNNodes); m[jobspec.EnvNNodes] = "1"; return m }(),
			want: &mpiPlan{key: []byte(mpiKey), port: "29502", self: "j-0.j"}},
		{name: "mpi-ssh", env: func() map[string]string {
			m := without(jobspec.EnvLauncher)
			m[jobspec.EnvLauncher], m[jobspec.EnvMPISSHPort] = "mpi-ssh", "29503"
			return m
		}(), rank: 1, want: &mpiPlan{key: []byte(mpiKey), port: "29502", rank: 1, sshPort: "29503"}},
		{name: "mpi-ssh without its port", env: func() map[string]string {
			m := without(jobspec.EnvLauncher)
			m[jobspec.EnvLauncher] = "mpi-ssh"
			return m
		}(), rank: 1, wantErr: "an mpi-ssh job's pod without $TAO_MPI_SSH_PORT"},
		{name: "no key", env: without(jobspec.EnvMPIKey), wantErr: "without $TAO_MPI_KEY or $TAO_MPI_AGENT_PORT"},
		{name: "no size on rank 0", env: without(jobspec.EnvNNodes), wantErr: "without the job's name ($TAO_JOB_ID) and size ($NNODES)"},
	} {
		got, err := mpiFromEnv(func(k string) string { return tc.env[k] }, tc.rank)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case !cmp.Equal(got, tc.want, cmp.AllowUnexported(mpiPlan{})):
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// freePort is a loopback port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	_ = ln.Close()
	return port
}

func mpiEnv(rank int, port string) map[string]string {
	return map[string]string{jobspec.EnvLauncher: "mpi", jobspec.EnvMPIKey: mpiKey, jobspec.EnvMPIAgentPort: port,
		s3layout.EnvJobID: "j", jobspec.EnvNNodes: "2", jobspec.EnvNodeRank: strconv.Itoa(rank)}
}

// dialAgent connects to the agent on port, trying until it is up.
func dialAgent(t *testing.T, port string) net.Conn {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err == nil {
			return conn
		}
		if time.Now().After(deadline) {
			t.Fatalf("the MPI agent never listened: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A pod other than rank 0's runs nothing of its own: it serves the agent until it is stopped.
func TestMPIWorkerServesTheAgent(t *testing.T) {
	port, dir := freePort(t), t.TempDir()
	ran := filepath.Join(dir, "ran")
	a := supervise(t, mpiEnv(1, port), "touch "+ran, func(sigs chan<- os.Signal) {
		var out bytes.Buffer
		code, err := mpiagent.Run(context.Background(), dialAgent(t, port), []byte(mpiKey),
			mpiagent.Request{Argv: []string{"echo", "started", "by", "rank", "0"}}, &out, io.Discard)
		if err != nil || code != 0 || out.String() != "started by rank 0\n" {
			t.Errorf("through the agent: %d, %v, %q", code, err, out.String())
		}
		// The daemons it runs know whose streams are the pod's log: this process's.
		out.Reset()
		code, err = mpiagent.Run(context.Background(), dialAgent(t, port), []byte(mpiKey),
			mpiagent.Request{Argv: []string{"echo", "$" + mpiagent.EnvLogPID}}, &out, io.Discard)
		if err != nil || code != 0 || out.String() != strconv.Itoa(os.Getpid())+"\n" {
			t.Errorf("$%s through the agent: %d, %v, %q, want %d", mpiagent.EnvLogPID, code, err, out.String(), os.Getpid())
		}
		// The daemon's group is the pod's command for `stage stacks`, and its Python processes
		// register the dump.
		out.Reset()
		code, err = mpiagent.Run(context.Background(), dialAgent(t, port), []byte(mpiKey),
			mpiagent.Request{Argv: []string{"echo", "$$", "$" + envStacksSignal}}, &out, io.Discard)
		groups, groupErr := RecordedGroups()
		if err != nil || code != 0 || groupErr != nil || len(groups) != 3 || out.String() != fmt.Sprintf("%d %d\n", groups[2], StacksSignal) {
			t.Errorf("through the agent: %d, %v, %q; recorded groups %v (%v), want each command's, this one last", code, err, out.String(), groups, groupErr)
		}
		if _, err := mpiagent.Run(context.Background(), dialAgent(t, port), []byte(strings.Repeat("f", 64)),
			mpiagent.Request{Argv: []string{"touch", ran}}, io.Discard, io.Discard); !errors.Is(err, mpiagent.ErrRefused) {
			t.Errorf("another key: %v, want refused", err)
		}
		sigs <- syscall.SIGTERM
	})
	if a.code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %d, want 143; stderr:\n%s", a.code, a.stderr)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("a pod other than rank 0's ran the command, or a wrong key ran one")
	}
	if !strings.Contains(a.stderr, "rank 1 serves the MPI agent") || !strings.Contains(a.stderr, "MPI agent: refused a connection from 127.0.0.1:") {
		t.Errorf("stderr does not say the agent and the refusal:\n%s", a.stderr)
	}
}

// A stopped worker lets the command it runs for rank 0's mpirun (a daemon) end by itself, as
// mpirun, stopped too, ends it; a command that does not end within MPIStopWait is killed.
func TestMPIWorkerStopLetsMpirunEndItsDaemons(t *testing.T) {
	for _, tc := range []struct {
		name, command string
		wantCode      int
		wantOut       string
	}{
		{"ends by itself", "sleep 0.5; echo ended", 0, "ended\n"},
		{"killed", "sleep 60; echo ended", 128 + int(syscall.SIGKILL), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := freePort(t)
			type result struct {
				code int
				err  error
				out  string
			}
			got := make(chan result, 1)
			start := time.Now()
			a := superviseWith(t, mpiEnv(1, port), "true", func(sigs chan<- os.Signal) {
				conn := dialAgent(t, port)
				go func() {
					var out bytes.Buffer
					code, err := mpiagent.Run(context.Background(), conn, []byte(mpiKey), mpiagent.Request{Argv: []string{tc.command}}, &out, io.Discard)
					got <- result{code, err, out.String()}
				}()
				time.Sleep(100 * time.Millisecond)
				sigs <- syscall.SIGTERM
			}, func(s *Supervisor) { s.MPIStopWait = time.Second })
			took := time.Since(start)
			r := <-got
			if a.code != 128+int(syscall.SIGTERM) || r.err != nil || r.code != tc.wantCode || r.out != tc.wantOut {
				t.Errorf("supervisor exit %d, command %d %v %q; want 143, and %d %q; stderr:\n%s", a.code, r.code, r.err, r.out, tc.wantCode, tc.wantOut, a.stderr)
			}
			if took > 5*time.Second {
				t.Errorf("the stopped worker took %s, want about MPIStopWait at most", took)
			}
			if killed := strings.Contains(a.stderr, "kubectl-tao: the commands the MPI agent runs did not end within 1s of the stop: killing them\n"); killed != (tc.wantOut == "") {
				t.Errorf("said the kill: %v, want %v; stderr:\n%s", killed, tc.wantOut == "", a.stderr)
			}
		})
	}
}

// Rank 0 runs the command once every other pod's agent answers.
func TestMPIRank0WaitsForTheWorkers(t *testing.T) {
	dir := t.TempDir()
	var dials, finished atomic.Int32
	a := superviseWith(t, mpiEnv(0, freePort(t)), "touch "+filepath.Join(dir, "ran"), nil, func(s *Supervisor) {
		s.MPIExitSettle = time.Millisecond
		s.DialAgent = func(_ context.Context, host string) (net.Conn, error) {
			// The worker's agent is up at the third try, and gone once told the world ended.
			if host != "j-1.j" || dials.Add(1) < 3 || finished.Load() > 0 {
				return nil, errors.New("connection refused")
			}
			client, server := net.Pipe()
			go (&mpiagent.Server{Key: []byte(mpiKey), Done: func() { finished.Add(1) }}).ServeConn(context.Background(), server)
			return client, nil
		}
	})
	// Three pings, the world's end told once the command succeeded, then a ping refused.
	if a.code != 0 || dials.Load() != 5 || finished.Load() != 1 {
		t.Errorf("exit %d after %d dials and %d Done: want 0 after 5 and 1; stderr:\n%s", a.code, dials.Load(), finished.Load(), a.stderr)
	}
	// Rank 0's agent, stopped at the end without waiting, has nothing to say about it.
	if strings.Contains(a.stderr, "did not end") {
		t.Errorf("rank 0 said it killed its agent's commands:\n%s", a.stderr)
	}
	// Two intervals of a second between the three tries.
	if !regexp.MustCompile(`kubectl-tao: the MPI agent of every other pod \(1\) answered after 2(\.\d)?s: running the command\n`).MatchString(a.stderr) {
		t.Errorf("stderr does not say how long rank 0 waited:\n%s", a.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err != nil {
		t.Error("rank 0 did not run the command")
	}
}

// A worker that never answers is named, and the command never runs.
func TestMPIRank0GivesUpNamingTheWorker(t *testing.T) {
	dir := t.TempDir()
	a := superviseWith(t, mpiEnv(0, freePort(t)), "touch "+filepath.Join(dir, "ran"), nil, func(s *Supervisor) {
		s.MPIReach = 300 * time.Millisecond
		s.DialAgent = func(context.Context, string) (net.Conn, error) { return nil, errors.New("no such host") }
	})
	if a.code != s3layout.ExitStageRun || !strings.Contains(a.stderr, "waited 300ms for every pod's MPI agent: the MPI agent of 1 of the job's pods never answered: j-1.j (no such host): the command was not run") {
		t.Errorf("exit %d, stderr:\n%s", a.code, a.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Error("rank 0 ran the command without its workers")
	}
}

// mpirun's 137 (a process killed, on any pod) becomes 1 on rank 0, so the pod failure policy
// retries the world instead of reading it as rank 0's own OOM kill; other codes are kept, and a
// worker's own code is its own.
func TestMPILauncherKilledIsRetried(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    map[string]string
		script string
		want   int
		says   bool
	}{
		{"rank 0, mpirun's 137", oneHost(mpiEnv(0, "")), "exit 137", 1, true},
		{"rank 0, another code", oneHost(mpiEnv(0, "")), "exit 3", 3, false},
		{"not an MPI job", map[string]string{jobspec.EnvNodeRank: "0"}, "exit 137", 137, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if port, ok := tc.env[jobspec.EnvMPIAgentPort]; ok && port == "" {
				tc.env[jobspec.EnvMPIAgentPort] = freePort(t)
			}
			a := superviseWith(t, tc.env, tc.script, nil, nil)
			said := strings.Contains(a.stderr, "kubectl-tao: the launcher exited 137: a process it started, here or on another pod, was killed (SIGKILL); exiting 1")
			if a.code != tc.want || said != tc.says {
				t.Errorf("exit %d, want %d; said the mapping %v, want %v; stderr:\n%s", a.code, tc.want, said, tc.says, a.stderr)
			}
		})
	}
}

// Rank 0 leaves the pods it never reached in its termination message, where diagnose reads them.
func TestMPIUnreachableTerminationMessage(t *testing.T) {
	msg := filepath.Join(t.TempDir(), "termination-log")
	a := superviseWith(t, mpiEnv(0, freePort(t)), "true", nil, func(s *Supervisor) {
		s.MPIReach = 300 * time.Millisecond
		s.TerminationLog = msg
		s.DialAgent = func(context.Context, string) (net.Conn, error) { return nil, errors.New("no such host") }
	})
	b, err := os.ReadFile(msg)
	if a.code != s3layout.ExitStageRun || err != nil ||
		string(b) != "waited 300ms for every pod's MPI agent: the MPI agent of 1 of the job's pods never answered: j-1.j (no such host)" {
		t.Errorf("exit %d, termination message %q (%v)", a.code, b, err)
	}
}

// oneHost makes env a one-pod MPI job's: rank 0 has no other agent to wait for.
func oneHost(env map[string]string) map[string]string {
	env[jobspec.EnvNNodes] = "1"
	return env
}

// Told by rank 0 that the world ended well, a worker exits 0 by itself, so that its pod
// succeeds and keeps its log; a Done with another key is refused and changes nothing.
func TestMPIWorkerEndsWithTheWorld(t *testing.T) {
	port := freePort(t)
	a := supervise(t, mpiEnv(1, port), "true", func(chan<- os.Signal) {
		if _, err := mpiagent.Run(context.Background(), dialAgent(t, port), []byte(strings.Repeat("f", 64)),
			mpiagent.Request{Done: true}, io.Discard, io.Discard); !errors.Is(err, mpiagent.ErrRefused) {
			t.Errorf("another key: %v, want refused", err)
		}
		if err := mpiagent.Finish(context.Background(), func(ctx context.Context, _ string) (net.Conn, error) {
			return dialAgent(t, port), nil
		}, []byte(mpiKey), []string{"j-1.j"}); err != nil {
			t.Errorf("Finish: %v", err)
		}
	})
	if a.code != 0 || !strings.Contains(a.stderr, "kubectl-tao: rank 0's launcher ended its MPI world well: this pod is done\n") {
		t.Errorf("exit %d, want 0; stderr:\n%s", a.code, a.stderr)
	}
}

// A worker's checkpoints are restored before its agent serves and kept as a torchrun rank's:
// the processes the agent starts are told the directory, the attempt and what to resume from,
// and what they save is uploaded once the world ends, for the next attempt's pod.
func TestMPIWorkerCheckpoints(t *testing.T) {
	s3 := s3fake.Start(t, s3fake.Options{})
	dir := filepath.Join(t.TempDir(), "ckpt")
	env := s3.Env()
	for k, v := range mpiEnv(1, freePort(t)) {
		env[k] = v
	}
	env[s3layout.EnvJobUID], env[s3layout.EnvStageCheckpointDir] = "uid-1", dir
	script := `echo "attempt=$TAO_ATTEMPT dir=$TAO_CHECKPOINT_DIR resume=$TAO_RESUME_CHECKPOINT"; echo x > "$TAO_CHECKPOINT_DIR/step-$TAO_ATTEMPT.pt"`
	for i, pod := range []string{"j-1-aaaaa", "j-1-bbbbb"} {
		// Each attempt's pod starts with an empty directory.
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		env[s3layout.EnvPodName] = pod
		port := env[jobspec.EnvMPIAgentPort]
		var out bytes.Buffer
		a := supervise(t, env, "true", func(chan<- os.Signal) {
			code, err := mpiagent.Run(context.Background(), dialAgent(t, port), []byte(mpiKey),
				mpiagent.Request{Argv: []string{script}}, &out, io.Discard)
			if err != nil || code != 0 {
				t.Errorf("attempt %d: %d, %v", i+1, code, err)
			}
			if err := mpiagent.Finish(context.Background(), func(context.Context, string) (net.Conn, error) {
				return dialAgent(t, port), nil
			}, []byte(mpiKey), []string{"j-1.j"}); err != nil {
				t.Errorf("Finish: %v", err)
			}
		})
		resume := ""
		if i > 0 {
			resume = filepath.Join(dir, "step-1.pt")
		}
		if want := fmt.Sprintf("attempt=%d dir=%s resume=%s\n", i+1, dir, resume); a.code != 0 || out.String() != want {
			t.Errorf("attempt %d: exit %d, the agent's command said %q, want %q; stderr:\n%s", i+1, a.code, out.String(), want, a.stderr)
		}
	}
}
