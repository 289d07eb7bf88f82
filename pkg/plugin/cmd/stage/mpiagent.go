package stage

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/mpiagent"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// agentFailed is the agent's exit code when it could not run the command at all: ssh's code for
// a failure of its own, which mpirun reports as a failed launch on that host.
const agentFailed = 255

// agentDialTimeout bounds the connection to a pod's agent; the wait for every pod to be up is
// the supervisor's, before mpirun starts.
const agentDialTimeout = 30 * time.Second

// MPIAgentOptions are the arguments of `stage mpi-agent [OPTIONS] HOST COMMAND...`.
type MPIAgentOptions struct {
	host    string
	command []string
	getenv  func(string) string
	dial    func(ctx context.Context, address string) (net.Conn, error)
	genericiooptions.IOStreams
}

// newMPIAgentCmd builds `stage mpi-agent`, the MPI job's remote shell: mpirun runs it through
// the link jobspec.MPIAgent as `AGENT [OPTIONS] HOST COMMAND...`. Its arguments are mpirun's,
// so cobra parses none of them.
func newMPIAgentCmd(streams genericiooptions.IOStreams, getenv func(string) string) *cobra.Command {
	d := net.Dialer{Timeout: agentDialTimeout}
	o := &MPIAgentOptions{getenv: getenv, IOStreams: streams, dial: func(ctx context.Context, address string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", address)
	}}
	return &cobra.Command{
		Use:                "mpi-agent [OPTIONS] HOST COMMAND...",
		Short:              "Run COMMAND on HOST, another pod of this MPI job, through its supervisor (mpirun's remote shell)",
		DisableFlagParsing: true,
		RunE:               cmdutil.RunE(o),
	}
}

// Complete reads HOST and COMMAND.
func (o *MPIAgentOptions) Complete(_ *cobra.Command, args []string) error {
	var err error
	if o.host, o.command, err = mpiagent.ParseArgs(args); err != nil {
		return o.fail(err)
	}
	return nil
}

// Validate checks that this is an MPI job's pod.
func (o *MPIAgentOptions) Validate() error {
	if o.getenv(jobspec.EnvMPIKey) == "" || o.getenv(jobspec.EnvMPIAgentPort) == "" {
		return o.fail(fmt.Errorf("$%s and $%s are unset: not in a pod of a `submit --launcher mpi` job", jobspec.EnvMPIKey, jobspec.EnvMPIAgentPort))
	}
	return nil
}

// Run asks HOST's agent to run the command, as ssh would: in that pod's own environment and
// working directory (mpirun sets its processes' own), with no stdin; the exit code is the
// command's.
func (o *MPIAgentOptions) Run(ctx context.Context) error {
	conn, err := o.dial(ctx, net.JoinHostPort(o.host, o.getenv(jobspec.EnvMPIAgentPort)))
	if err != nil {
		return o.fail(fmt.Errorf("reaching the MPI agent of %s: %w", o.host, err))
	}
	code, err := mpiagent.Run(ctx, conn, []byte(o.getenv(jobspec.EnvMPIKey)), mpiagent.Request{Argv: o.command}, o.Out, o.ErrOut)
	if err != nil {
		if errors.Is(err, mpiagent.ErrRefused) {
			err = fmt.Errorf("%s: %w (is it a pod of another job?)", o.host, err)
		}
		return o.fail(err)
	}
	return exitcode.Passthrough(code)
}

// fail says why on stderr, as a remote shell does, and exits agentFailed.
func (o *MPIAgentOptions) fail(err error) error {
	fmt.Fprintf(o.ErrOut, "%s: %v\n", filepath.Base(jobspec.MPIAgent), err)
	return exitcode.Passthrough(agentFailed)
}
