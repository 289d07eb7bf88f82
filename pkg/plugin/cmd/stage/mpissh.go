package stage

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/mpiagent"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// MPISSHOptions are the arguments of `stage mpi-ssh SSH_ARGS...`.
type MPISSHOptions struct {
	args []string
	exec func(argv []string, toPodLog bool, logs [2]string) error
	genericiooptions.IOStreams
}

// newMPISSHCmd builds `stage mpi-ssh`, an mpi-ssh job's remote shell: mpirun and hydra run it
// through the link jobspec.MPISSHClient with ssh's own arguments, and it becomes the image's
// ssh with the job's settings (jobspec.SSHConfig) in place of the user's.
func newMPISSHCmd(streams genericiooptions.IOStreams) *cobra.Command {
	o := &MPISSHOptions{IOStreams: streams, exec: mpiagent.ExecProcess}
	return &cobra.Command{
		Use:                "mpi-ssh SSH_ARGS...",
		Short:              "Become the image's ssh with this mpi-ssh job's key and host keys (mpirun's remote shell)",
		DisableFlagParsing: true,
		RunE:               cmdutil.RunE(o),
	}
}

// Complete reads ssh's arguments.
func (o *MPISSHOptions) Complete(_ *cobra.Command, args []string) error {
	o.args = args
	return nil
}

// Validate checks that there is a host to go to.
func (o *MPISSHOptions) Validate() error {
	if len(o.args) == 0 {
		return o.fail(errors.New("no host: the launcher runs it as ssh, HOST COMMAND..."))
	}
	return nil
}

// Run execs ssh; it returns only when ssh could not be started.
func (o *MPISSHOptions) Run(context.Context) error {
	argv := append([]string{"ssh", "-F", path.Join(jobspec.MPIDir, jobspec.SSHConfigKey)}, o.args...)
	if err := o.exec(argv, false, [2]string{}); err != nil {
		return o.fail(fmt.Errorf("running the image's ssh: %w (--launcher mpi-ssh needs an ssh client in the image; --launcher mpi needs nothing there)", err))
	}
	return nil
}

// fail says why on stderr and exits as ssh does for a failure of its own.
func (o *MPISSHOptions) fail(err error) error {
	fmt.Fprintf(o.ErrOut, "%s: %v\n", filepath.Base(jobspec.MPISSHClient), err)
	return exitcode.Passthrough(agentFailed)
}
