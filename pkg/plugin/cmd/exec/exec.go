// Package exec implements `kubectl tao exec`: it resolves a rank of a job to its pod
// (cmd/util's FindRank), then hands over to kubectl's own exec code (k8s.io/kubectl/pkg/cmd/exec),
// so streams, TTYs, terminal resizing and the websocket/SPDY fallback behave exactly as with
// kubectl.
package exec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	uexec "k8s.io/client-go/util/exec"
	kexec "k8s.io/kubectl/pkg/cmd/exec"
	"k8s.io/kubectl/pkg/util/interrupt"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/tail"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

const execLong = `Run a command in the container of one rank of a job, as kubectl exec does.

The rank's pod is found from the job's pods (their completion index); rank 0 by default. When
a rank has several pods (a replaced one still terminating), the running one is used. A rank
that does not exist exits 3; a rank whose pod is not running exits 1, and both list the job's
ranks and their phases.

Streams, -i/-t and terminal resizing are kubectl's own. The exit code is the remote command's
when it exits non-zero (as with kubectl exec), otherwise the usual table (3: no such job or
rank, 6: no permission to create pods/exec).`

const execExample = `  # Python stacks of every process of a hung rank 3 (py-spy must be in the image)
  kubectl tao exec ddp --rank 3 -- bash -c 'for p in $(pgrep -f train.py); do py-spy dump --pid $p; done'

  # GPU state of rank 1
  kubectl tao exec ddp --rank 1 -- nvidia-smi

  # An interactive shell in rank 0
  kubectl tao exec -it ddp -- bash`

// ExecOptions are the flags and arguments of `kubectl tao exec`.
type ExecOptions struct {
	Rank      int
	Container string
	Stdin     bool
	TTY       bool
	Quiet     bool

	job       string
	command   []string
	namespace string
	factory   cmdutil.Factory
	// executor runs the remote command; kubectl's DefaultRemoteExecutor outside tests.
	executor kexec.RemoteExecutor
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao exec`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	return (&ExecOptions{factory: f, executor: &kexec.DefaultRemoteExecutor{}, IOStreams: streams}).cobraCommand(f)
}

func (o *ExecOptions) cobraCommand(f cmdutil.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:                   "exec JOB [--rank N] [-c CONTAINER] [-i] [-t] -- COMMAND [ARG...]",
		DisableFlagsInUseLine: true,
		Short:                 "Run a command in one rank's container (kubectl exec for a job)",
		Long:                  execLong,
		Example:               execExample,
		Args:                  cobra.ArbitraryArgs,
		RunE:                  cmdutil.RunE(o),
	}
	fl := cmd.Flags()
	fl.IntVar(&o.Rank, "rank", o.Rank, "Rank (completion index) whose pod to run in.")
	fl.StringVarP(&o.Container, "container", "c", o.Container, "Container name; default: the pod's default container (tao).")
	fl.BoolVarP(&o.Stdin, "stdin", "i", o.Stdin, "Pass stdin to the container.")
	fl.BoolVarP(&o.TTY, "tty", "t", o.TTY, "Stdin is a TTY.")
	fl.BoolVarP(&o.Quiet, "quiet", "q", o.Quiet, "Only print output from the remote session.")
	cmd.ValidArgsFunction = cmdutil.CompleteJobNames(f)
	return cmd
}

// Complete splits JOB from the command at "--" and resolves the namespace.
func (o *ExecOptions) Complete(cmd *cobra.Command, args []string) error {
	dash := cmd.ArgsLenAtDash()
	if dash < 0 {
		return exitcode.Usagef(`expected JOB -- COMMAND: put the command after "--"`)
	}
	if dash != 1 {
		return exitcode.Usagef(`expected one JOB before "--", got %d arguments`, dash)
	}
	o.command = args[dash:]
	var err error
	o.namespace, o.job, err = cmdutil.CompleteJob(o.factory, args)
	return err
}

// Validate checks the flags without contacting the server.
func (o *ExecOptions) Validate() error {
	switch {
	case len(o.command) == 0:
		return exitcode.Usagef(`no command after "--"`)
	}
	return cmdutil.ValidateRank(o.Rank)
}

// Run resolves the rank's pod and runs the command there through kubectl's exec.
func (o *ExecOptions) Run(ctx context.Context) error {
	t, err := cmdutil.FindRank(ctx, o.factory, o.namespace, o.job, o.Rank)
	if err != nil {
		return err
	}
	pod := t.Pod
	ko := &kexec.ExecOptions{
		StreamOptions: kexec.StreamOptions{
			Namespace: o.namespace,
			PodName:   pod.Name,
			// The container logs reads: the job's own, picked without kubectl's "Defaulted
			// container" line on stderr.
			ContainerName: tail.TargetOf(pod, o.Container, false).Container,
			Stdin:         o.Stdin,
			TTY:           o.TTY,
			Quiet:         o.Quiet,
			// A parent handler keeps kubectl's terminal guard from calling os.Exit on a signal:
			// the terminal is restored, and the command's context (cancelled by the same
			// signal) ends the stream.
			InterruptParent: interrupt.New(func(os.Signal) {}),
			IOStreams:       o.IOStreams,
		},
		Command:   o.command,
		Executor:  contextExecutor{ctx: ctx, RemoteExecutor: o.executor},
		PodClient: t.Client.CoreV1(),
		Config:    t.Config,
	}
	if err := ko.Validate(); err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	return execError(ctx, ko.Run(), pod, o.Rank, o.job)
}

// execError gives the remote command's non-zero exit status back as this process's (as
// kubectl does), and names the pod in every other failure.
func execError(ctx context.Context, err error, pod *corev1.Pod, rank int, job string) error {
	if err == nil {
		return nil
	}
	var ee uexec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		return exitcode.WithCode(exitcode.Code(ee.ExitStatus()),
			fmt.Errorf("command terminated with exit code %d (pod %s, rank %d)", ee.ExitStatus(), pod.Name, rank))
	}
	if ctx.Err() != nil {
		return exitcode.WithCode(exitcode.Error, fmt.Errorf("interrupted: exec in pod %s (rank %d of job.batch/%s) stopped", pod.Name, rank, job))
	}
	return fmt.Errorf("exec in pod %s (rank %d of job.batch/%s): %w", pod.Name, rank, job, err)
}

// contextExecutor runs kubectl's executor under the command's context, so Ctrl-C (which the
// plugin turns into a cancelled context) ends the stream instead of being ignored.
type contextExecutor struct {
	ctx context.Context
	kexec.RemoteExecutor
}

func (e contextExecutor) Execute(u *url.URL, cfg *rest.Config, stdin io.Reader, stdout, stderr io.Writer, tty bool, q remotecommand.TerminalSizeQueue) error {
	return e.ExecuteWithContext(e.ctx, u, cfg, stdin, stdout, stderr, tty, q)
}
