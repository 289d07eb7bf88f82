// Package portforward implements `kubectl tao port-forward`: it resolves a rank of a job to its
// pod (cmd/util's FindRank), then hands over to kubectl's own port-forward code
// (k8s.io/kubectl/pkg/cmd/portforward).
package portforward

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	kpf "k8s.io/kubectl/pkg/cmd/portforward"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

const portForwardLong = `Forward local ports to one rank's pod of a job, as kubectl port-forward does: TensorBoard,
a debugger, a metrics endpoint of rank 0 or any other rank.

Ports are [LOCAL_PORT:]REMOTE_PORT; ":REMOTE_PORT" picks a free local port. The rank's pod is
found as for exec (rank 0 by default; a running pod; the ranks and their phases listed when it
is not running). "Forwarding from ..." lines go to stdout, as with kubectl, so scripts can read
the local port. Ctrl-C stops forwarding.`

const portForwardExample = `  # TensorBoard of rank 0 on http://localhost:6006
  kubectl tao port-forward ddp 6006

  # Rank 2's port 8080 on a free local port, listening on every address
  kubectl tao port-forward ddp --rank 2 --address 0.0.0.0 :8080`

// PortForwardOptions are the flags and arguments of `kubectl tao port-forward`.
type PortForwardOptions struct {
	Rank    int
	Address []string

	job       string
	ports     []string
	namespace string
	factory   cmdutil.Factory
	// newOptions builds kubectl's options; tests replace its forwarder.
	newOptions func(genericiooptions.IOStreams) *kpf.PortForwardOptions
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao port-forward`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := &PortForwardOptions{Address: []string{"localhost"}, factory: f, newOptions: kpf.NewDefaultPortForwardOptions, IOStreams: streams}
	return o.cobraCommand(f)
}

func (o *PortForwardOptions) cobraCommand(f cmdutil.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:                   "port-forward JOB [--rank N] [--address ADDR] [LOCAL_PORT:]REMOTE_PORT...",
		DisableFlagsInUseLine: true,
		Short:                 "Forward local ports to one rank's pod (kubectl port-forward for a job)",
		Long:                  portForwardLong,
		Example:               portForwardExample,
		Args:                  cobra.ArbitraryArgs,
		RunE:                  cmdutil.RunE(o),
	}
	cmd.Flags().IntVar(&o.Rank, "rank", o.Rank, "Rank (completion index) whose pod to forward to.")
	cmd.Flags().StringSliceVar(&o.Address, "address", o.Address, "Addresses to listen on (comma separated): IP addresses or localhost (binds 127.0.0.1 and ::1).")
	cmd.ValidArgsFunction = cmdutil.CompleteJobNames(f)
	return cmd
}

// Complete reads JOB and the ports and resolves the namespace.
func (o *PortForwardOptions) Complete(_ *cobra.Command, args []string) error {
	if len(args) < 2 {
		return exitcode.Usagef("expected JOB and at least one [LOCAL_PORT:]REMOTE_PORT, got %s", plural.N(len(args), "argument"))
	}
	o.ports = args[1:]
	var err error
	o.namespace, o.job, err = cmdutil.CompleteJob(o.factory, args)
	return err
}

// Validate checks the ports and flags without contacting the server.
func (o *PortForwardOptions) Validate() error {
	if err := cmdutil.ValidateRank(o.Rank); err != nil {
		return err
	}
	if len(o.Address) == 0 {
		return exitcode.Usagef("--address must name at least one address")
	}
	for _, p := range o.ports {
		if err := ParsePort(p); err != nil {
			return exitcode.WithCode(exitcode.Usage, err)
		}
	}
	return nil
}

// ParsePort checks one [LOCAL_PORT:]REMOTE_PORT. Only numbers: kubectl-tao's pods declare no
// named container ports.
func ParsePort(s string) error {
	local, remote, ok := strings.Cut(s, ":")
	if !ok {
		local, remote = s, s
	}
	if n, err := strconv.Atoi(remote); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("invalid port %q: the remote port must be a number 1-65535 ([LOCAL_PORT:]REMOTE_PORT)", s)
	}
	if local == "" {
		return nil
	}
	if n, err := strconv.Atoi(local); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("invalid port %q: the local port must be a number 0-65535, or empty for a free one", s)
	}
	return nil
}

// Run resolves the rank's pod and forwards through kubectl's port-forward until Ctrl-C or the
// connection ends.
func (o *PortForwardOptions) Run(ctx context.Context) error {
	t, err := cmdutil.FindRank(ctx, o.factory, o.namespace, o.job, o.Rank)
	if err != nil {
		return err
	}
	restClient, err := rest.RESTClientFor(t.Config)
	if err != nil {
		return err
	}
	ko := o.newOptions(o.IOStreams)
	ko.Namespace, ko.PodName = o.namespace, t.Pod.Name
	ko.Config, ko.RESTClient, ko.PodClient = t.Config, restClient, t.Client.CoreV1()
	ko.Address, ko.Ports = o.Address, o.ports
	ko.StopChannel, ko.ReadyChannel = make(chan struct{}, 1), make(chan struct{})
	if err := ko.Validate(); err != nil {
		return err
	}
	if err := ko.RunPortForwardContext(ctx); err != nil {
		return fmt.Errorf("port-forward to pod %s (rank %d of job.batch/%s): %w", t.Pod.Name, o.Rank, o.job, err)
	}
	return nil
}
