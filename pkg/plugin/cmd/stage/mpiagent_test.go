package stage

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/mpiagent"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

const agentKey = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// agentOn serves an agent of key on a loopback port whose command prints its words and exits
// 3, and returns the port.
func agentOn(t *testing.T, key string, got chan<- []string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &mpiagent.Server{Key: []byte(key), Exec: func(_ context.Context, req mpiagent.Request, stdout, stderr io.Writer) (int, error) {
		got <- req.Argv
		fmt.Fprintln(stdout, strings.Join(req.Argv, " "))
		fmt.Fprintln(stderr, "from the worker")
		return 3, nil
	}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(ctx, ln)
	}()
	t.Cleanup(func() { cancel(); <-done })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

func TestMPIAgent(t *testing.T) {
	got := make(chan []string, 1)
	port := agentOn(t, agentKey, got)
	env := map[string]string{jobspec.EnvMPIKey: agentKey, jobspec.EnvMPIAgentPort: port}
	// As OpenMPI calls it: ssh-like options, the host, then the daemon's line.
	out, errOut, err := run(env, "mpi-agent", "-x", "127.0.0.1", "orted", "-mca", "ess", "\"env\"")
	if code, _ := exitcode.PassedThrough(err); code != 3 {
		t.Fatalf("exit %v, want the command's 3 (stderr %q)", err, errOut)
	}
	if out != "orted -mca ess \"env\"\n" || errOut != "from the worker\n" {
		t.Errorf("stdout %q, stderr %q", out, errOut)
	}
	if words := <-got; strings.Join(words, " ") != "orted -mca ess \"env\"" {
		t.Errorf("the agent ran %q", words)
	}
}

func TestMPIAgentFailures(t *testing.T) {
	port := agentOn(t, agentKey, make(chan []string, 1))
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no host", map[string]string{jobspec.EnvMPIKey: agentKey, jobspec.EnvMPIAgentPort: port}, nil,
			"tao-mpi-agent: want `[OPTIONS] HOST COMMAND...`: no host\n"},
		{"not an MPI pod", nil, []string{"127.0.0.1", "true"},
			"tao-mpi-agent: $TAO_MPI_KEY and $TAO_MPI_AGENT_PORT are unset: not in a pod of a `submit --launcher mpi` job\n"},
		{"another job's key", map[string]string{jobspec.EnvMPIKey: strings.Repeat("f", 64), jobspec.EnvMPIAgentPort: port}, []string{"127.0.0.1", "true"},
			"tao-mpi-agent: 127.0.0.1: the MPI agent refused the connection: wrong key (is it a pod of another job?)\n"},
		{"nobody listening", map[string]string{jobspec.EnvMPIKey: agentKey, jobspec.EnvMPIAgentPort: "1"}, []string{"127.0.0.1", "true"},
			"tao-mpi-agent: reaching the MPI agent of 127.0.0.1: dial tcp 127.0.0.1:1: connect: connection refused\n"},
	} {
		_, errOut, err := run(tc.env, append([]string{"mpi-agent"}, tc.args...)...)
		if code, ok := exitcode.PassedThrough(err); !ok || code != agentFailed || errOut != tc.want {
			t.Errorf("%s: exit %v, stderr %q; want %d and %q", tc.name, err, errOut, agentFailed, tc.want)
		}
	}
}
