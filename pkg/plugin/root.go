// Package plugin assembles the `kubectl tao` command tree and turns errors into exit codes.
package plugin

import (
	"context"
	goflag "flag"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	// Linked in so kubeconfigs that use auth-provider plugins (OIDC) work as with kubectl.
	_ "k8s.io/client-go/plugin/pkg/client/auth"

	// Before kubectl's get printing initialises: keeps its translation catalogue unloaded.
	_ "github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/noi18n"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/cancel"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/capacity"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/completion"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/config"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/createpullsecret"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/delete"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/deleteartifacts"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/diagnose"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/exec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/list"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/logs"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/portforward"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/preflight"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/prune"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/rbac"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/replicas"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/results"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/scale"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/stacks"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/stage"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/status"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/submit"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/top"
	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/version"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/wait"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// Deps are what the command tree needs from the outside world, injected so tests can replace
// each one.
type Deps struct {
	Streams genericiooptions.IOStreams
	Getenv  func(string) string
	// Factory, when set, replaces the one built from kubectl's flags (tests use a fake clientset).
	Factory cmdutil.Factory
	// RandomName makes the suffix of generated Job names.
	RandomName func() string
	// Clock gives AGE columns their "now"; nil means the real clock.
	Clock clock.PassiveClock
}

// NewRootCmd builds `kubectl tao` and its subcommands.
func NewRootCmd(d Deps) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kubectl-tao",
		Short: "Run GPU training jobs (NVIDIA TAO, PyTorch, torchrun) on Kubernetes",
		Long: "kubectl tao runs GPU training containers, single or multi-node, as Kubernetes Jobs,\n" +
			"and tells you what happened to them.",
		Annotations: map[string]string{
			cobra.CommandDisplayNameAnnotation: "kubectl tao",
		},
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	cmd.SetIn(d.Streams.In)
	cmd.SetOut(d.Streams.Out)
	cmd.SetErr(d.Streams.ErrOut)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return exitcode.WithCode(exitcode.Usage, err)
	})

	flags := genericclioptions.NewConfigFlags(true)
	flags.AddFlags(cmd.PersistentFlags())
	addVerbosityFlag(cmd)
	f := d.Factory
	if f == nil {
		f = cmdutil.NewFactory(flags, d.Getenv)
	}

	clk := d.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	cmd.AddCommand(
		status.NewCmd(f, d.Streams, clk, d.Getenv),
		list.NewCmd(f, d.Streams, clk),
		wait.NewCmd(f, d.Streams, clk),
		submit.NewCmd(f, d.Streams, clk, d.RandomName, d.Getenv, version.Get().Version),
		replicas.NewCmd(f, d.Streams, clk),
		scale.NewCmd(f, d.Streams),
		diagnose.NewCmd(f, d.Streams, clk, d.Getenv),
		top.NewCmd(f, d.Streams, clk),
		logs.NewCmd(f, d.Streams, d.Getenv),
		exec.NewCmd(f, d.Streams),
		stacks.NewCmd(f, d.Streams),
		portforward.NewCmd(f, d.Streams),
		cancel.NewCmd(f, d.Streams),
		delete.NewCmd(f, d.Streams, clk),
		prune.NewCmd(f, d.Streams, clk),
		deleteartifacts.NewCmd(f, d.Streams, d.Getenv),
		results.NewCmd(f, d.Streams, d.Getenv),
		capacity.NewCmd(f, d.Streams),
		preflight.NewCmd(f, d.Streams, d.Getenv),
		rbac.NewCmd(f, d.Streams),
		createpullsecret.NewCmd(f, d.Streams, d.Getenv),
		config.NewCmd(d.Streams, d.Getenv),
		version.NewCmd(d.Streams),
		completion.NewCmd(d.Streams),
		stage.NewCmd(d.Streams, d.Getenv),
	)
	completion.RegisterFlags(cmd, flags, f)
	usageArgs(cmd)
	return cmd
}

// addVerbosityFlag adds kubectl's -v: klog's verbosity, where the long-running commands log
// each retry they make while the API server is away (see package outage), and client-go its
// requests.
func addVerbosityFlag(cmd *cobra.Command) {
	fs := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(fs)
	cmd.PersistentFlags().AddGoFlag(fs.Lookup("v"))
}

// usageArgs makes every command's argument-count errors usage errors (exit 2), whichever
// cobra.PositionalArgs the command uses.
func usageArgs(cmd *cobra.Command) {
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, a []string) error {
			return exitcode.WithCode(exitcode.Usage, args(c, a))
		}
	}
	for _, c := range cmd.Commands() {
		usageArgs(c)
	}
}

// Args is the command line the process runs for its argv: mpirun calls the binary through the
// MPI agent's link (jobspec.MPIAgent) or the mpi-ssh client's (jobspec.MPISSHClient) with a
// remote shell's arguments, which are then those of `stage mpi-agent` or `stage mpi-ssh`;
// otherwise it is argv without the program's name.
func Args(argv []string) []string {
	if len(argv) == 0 {
		return nil
	}
	switch filepath.Base(argv[0]) {
	case filepath.Base(jobspec.MPIAgent):
		return append([]string{"stage", "mpi-agent"}, argv[1:]...)
	case filepath.Base(jobspec.MPISSHClient):
		return append([]string{"stage", "mpi-ssh"}, argv[1:]...)
	}
	return argv[1:]
}

// Execute runs the command line args and returns the process exit code. Errors are printed the
// way kubectl prints them: "error: ..." on stderr, plus a pointer to --help for usage errors.
func Execute(ctx context.Context, d Deps, args []string) int {
	root := NewRootCmd(d)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return int(exitcode.OK)
	}
	if code, ok := exitcode.PassedThrough(err); ok {
		return code
	}
	// cobra reports an unknown subcommand as a plain error; it is a usage error all the same.
	if strings.HasPrefix(err.Error(), "unknown command") {
		err = exitcode.WithCode(exitcode.Usage, err)
	}
	err = exitcode.Explain(err)
	fmt.Fprintf(d.Streams.ErrOut, "error: %v\n", err)
	if exitcode.IsUsage(err) && cmd != nil {
		fmt.Fprintf(d.Streams.ErrOut, "See '%s --help' for usage.\n", cmd.CommandPath())
	}
	return int(exitcode.Of(err))
}
