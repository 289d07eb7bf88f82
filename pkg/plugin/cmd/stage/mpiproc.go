package stage

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/mpiagent"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/supervisor"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// procNotRun is the exit code of a process that could not be started: a shell's "command not
// found", which mpirun reports for the process as it would without the fork agent.
const procNotRun = 127

// MPIProcOptions are the arguments of `stage mpi-proc COMMAND...`.
type MPIProcOptions struct {
	command []string
	getenv  func(string) string
	exec    func(argv []string, toPodLog bool, logs [2]string) error
	genericiooptions.IOStreams
}

// newMPIProcCmd builds `stage mpi-proc`, OpenMPI's fork agent in an MPI job
// (jobspec.MPIProcAgent): the daemon runs every process through it, and on a pod other than
// rank 0's it points the process's output at that pod's own log before it becomes the process.
func newMPIProcCmd(streams genericiooptions.IOStreams, getenv func(string) string) *cobra.Command {
	o := &MPIProcOptions{getenv: getenv, IOStreams: streams, exec: mpiagent.ExecProcess}
	return &cobra.Command{
		Use:                "mpi-proc COMMAND...",
		Short:              "Become COMMAND, its output in this pod's log unless this is rank 0's pod (OpenMPI's fork agent)",
		DisableFlagParsing: true,
		RunE:               cmdutil.RunE(o),
	}
}

// Complete reads COMMAND.
func (o *MPIProcOptions) Complete(_ *cobra.Command, args []string) error {
	o.command = args
	return nil
}

// Validate checks that there is a command.
func (o *MPIProcOptions) Validate() error {
	if len(o.command) == 0 {
		return exitcode.WithCode(exitcode.Usage, errors.New("mpi-proc: no command: the fork agent runs COMMAND..."))
	}
	return nil
}

// Run execs the command; it returns only when the command could not be started. On rank 0's
// pod, and where the rank or the supervisor (mpiagent.EnvLogPID, which the agent sets for the
// daemons it runs) is unknown, the output stays with the daemon (mpirun on rank 0).
func (o *MPIProcOptions) Run(context.Context) error {
	rank, err := supervisor.NodeRank(o.getenv)
	pid, ok := mpiagent.LogPID(o.getenv(mpiagent.EnvLogPID))
	toPodLog := ok && err == nil && rank != 0 && jobspec.IsMPI(jobspec.Launcher(o.getenv(jobspec.EnvLauncher)))
	if err := o.exec(o.command, toPodLog, mpiagent.PodLog(pid)); err != nil {
		fmt.Fprintf(o.ErrOut, "mpi-proc: %s: %v\n", o.command[0], err)
		return exitcode.Passthrough(procNotRun)
	}
	return nil
}
