// Package capacity implements `kubectl tao capacity`: allocatable, requested and free GPUs per
// node, read a page at a time through nodeusage.
package capacity

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/nodeusage"
	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/printer"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/kueue"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

const example = `  # Free GPUs on every node, with totals
  kubectl tao capacity

  # Only H100 nodes; with CPU, memory and pod counts
  kubectl tao capacity -l nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3 -o wide

  # For scripts: {"nodes":[{"name","product","allocatable","requested","free"}],"total":{...}}
  kubectl tao capacity -o json

  # Next to the nodes, each Kueue ClusterQueue's GPU quota per flavor and what is used of it
  kubectl tao capacity --queues`

// Options are the flags of `kubectl tao capacity`.
type Options struct {
	Selector string
	// Queues adds Kueue's ClusterQueues to the report.
	Queues bool

	out *printer.Flags

	factory cmdutil.Factory
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao capacity`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{out: printer.NewFlags(printer.WithNames(), printer.WithTable()), factory: f, IOStreams: streams}
	cmd := &cobra.Command{
		Use:                   "capacity [-l NODE_SELECTOR] [--queues] [-o wide|json]",
		DisableFlagsInUseLine: true,
		Short:                 "Show allocatable, requested and free GPUs per node",
		Long: "Show, for every node, its GPU product (GPU Feature Discovery's nvidia.com/gpu.product label) and its\n" +
			"nvidia.com/gpu: allocatable, requested by the pods on it that have not ended (running or pending),\n" +
			"and free, and a column FREE/ALLOCATABLE for each other GPU resource the nodes advertise (MIG slices such as\n" +
			"mig-1g.10gb, gpu.shared); then the totals. --queues adds each Kueue ClusterQueue's GPU quota per flavor, what its\n" +
			"workloads use of it, and its pending and admitted workloads. Needs to list nodes and pods in every\n" +
			"namespace.\n\n" +
			"Guide: https://github.com/kubectl-tao/kubectl-tao/blob/main/docs/preflight.md",
		Example: example,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVarP(&o.Selector, "selector", "l", "", "Node label selector, e.g. -l nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3.")
	cmd.Flags().BoolVar(&o.Queues, "queues", false, "Also show each Kueue ClusterQueue's GPU quota (whole GPUs, MIG slices, shared GPUs) per flavor and its workloads (needs to list ClusterQueues).")
	o.out.AddFlags(cmd.Flags(), "a table of nodes and the totals")
	return cmd
}

// Validate checks the selector and the output format.
func (o *Options) Validate() error {
	if err := o.out.Validate(); err != nil {
		return err
	}
	if _, err := labels.Parse(o.Selector); err != nil {
		return exitcode.Usagef("invalid --selector %q: %w", o.Selector, err)
	}
	return nil
}

// Run lists pods then nodes and prints the report.
func (o *Options) Run(ctx context.Context) error {
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return err
	}
	// Every page is garbage once summed, so a tighter GC target keeps the peak lower at no cost in
	// time (docs/benchmarks.md, "capacity").
	defer debug.SetGCPercent(debug.SetGCPercent(50))
	usage, err := nodeusage.Usages(ctx, client)
	if err != nil {
		return fmt.Errorf("listing pods in all namespaces: %w", err)
	}
	var rows []NodeRow
	err = nodeusage.EachNodePage(ctx, client, o.Selector, func(page []corev1.Node) {
		for i := range page {
			rows = append(rows, Row(&page[i], usage[page[i].Name]))
		}
	})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	rep := Finish(rows)
	if o.Queues {
		queues, err := o.clusterQueues(ctx, client)
		if err != nil {
			return err
		}
		rep.Queues = &queues
	}
	if !o.out.Human() {
		// The result names nodes (and ClusterQueues), for -o name.
		names := make([]string, 0, len(rep.Nodes))
		for _, n := range rep.Nodes {
			names = append(names, "node/"+n.Name)
		}
		if rep.Queues != nil {
			for _, q := range *rep.Queues {
				names = append(names, "clusterqueue."+kueue.Group+"/"+q.Name)
			}
		}
		return o.out.Print(o.Out, rep, names...)
	}
	if len(rep.Nodes) == 0 {
		fmt.Fprintln(o.ErrOut, "No resources found")
	} else if err := o.out.PrintTable(o.Out, Table(rep)); err != nil {
		return err
	}
	if rep.Queues == nil || len(*rep.Queues) == 0 {
		return nil
	}
	if len(rep.Nodes) > 0 {
		fmt.Fprintln(o.Out)
	}
	return o.out.PrintTable(o.Out, QueuesTable(*rep.Queues))
}

// clusterQueues reads Kueue's ClusterQueues for --queues. A cluster without Kueue has none,
// and says so on stderr; a user who may not list them (they are cluster-scoped) gets an error,
// as for the nodes.
func (o *Options) clusterQueues(ctx context.Context, client kubernetes.Interface) ([]kueue.ClusterQueue, error) {
	dyn, err := o.factory.DynamicClient()
	if err != nil {
		return nil, err
	}
	queues, installed, err := kueue.ClusterQueues(ctx, client.Discovery(), dyn)
	if err != nil {
		return nil, fmt.Errorf("listing Kueue ClusterQueues: %w", err)
	}
	if !installed {
		fmt.Fprintf(o.ErrOut, "Warning: --queues: Kueue is not installed on this cluster (the API server serves no %s API): no queues to show\n", kueue.Group)
		return []kueue.ClusterQueue{}, nil
	}
	if len(queues) == 0 {
		fmt.Fprintln(o.ErrOut, "No ClusterQueues found")
	}
	return queues, nil
}
