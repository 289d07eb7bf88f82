package rbac

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

const example = `  # Let alice use kubectl tao in namespace ml (an admin applies it)
  kubectl tao rbac -n ml --user alice | kubectl apply -f -

  # A CI service account, or a whole group
  kubectl tao rbac -n ml --serviceaccount ci:runner | kubectl apply -f -
  kubectl tao rbac -n ml --group ml-team | kubectl apply -f -`

// Options are the flags of `kubectl tao rbac`.
type Options struct {
	User, Group, ServiceAccount string
	// GPUMetrics adds the Role that lets top read dcgm-exporter in GPUMetricsNamespace.
	GPUMetrics          bool
	GPUMetricsNamespace string

	factory cmdutil.Factory
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao rbac`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{factory: f, IOStreams: streams}
	cmd := &cobra.Command{
		Use:                   "rbac [--user U | --group G | --serviceaccount NS:SA]",
		DisableFlagsInUseLine: true,
		Short:                 "Print the least-privilege RBAC that kubectl tao needs, ready for kubectl apply",
		Long: "Print, as YAML for `kubectl apply -f -`, a Role granting exactly what every kubectl tao command\n" +
			"does in the namespace, and a ClusterRole for the cluster-wide reads (nodes, pods and daemonsets of\n" +
			"all namespaces) that only the capacity guard, preflight and capacity use. With --user, --group or\n" +
			"--serviceaccount, the RoleBinding and ClusterRoleBinding for that subject too. Nothing is sent\n" +
			"to the cluster.",
		Example: example,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.Run()
		},
	}
	cmd.Flags().StringVar(&o.User, "user", "", "User to bind the roles to.")
	cmd.Flags().StringVar(&o.Group, "group", "", "Group to bind the roles to.")
	cmd.Flags().StringVar(&o.ServiceAccount, "serviceaccount", "", "ServiceAccount NAMESPACE:NAME to bind the roles to.")
	cmd.Flags().BoolVar(&o.GPUMetrics, "gpu-metrics", false, "Also a Role in dcgm-exporter's namespace granting get on pods/proxy there only, so that top reads GPU numbers from the exporter instead of running nvidia-smi in the ranks.")
	cmd.Flags().StringVar(&o.GPUMetricsNamespace, "gpu-metrics-namespace", "gpu-operator", "With --gpu-metrics: the namespace dcgm-exporter runs in.")
	return cmd
}

// Run prints the objects.
func (o *Options) Run() error {
	subject, err := ParseSubject(o.User, o.Group, o.ServiceAccount)
	if err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	ns, err := o.factory.Namespace()
	if err != nil {
		return err
	}
	objs := Build(ns, subject)
	if o.GPUMetrics {
		if o.GPUMetricsNamespace == "" {
			return exitcode.Usagef("--gpu-metrics-namespace must name a namespace")
		}
		objs = WithGPUMetrics(objs, o.GPUMetricsNamespace, subject)
	}
	return Print(o.Out, objs)
}

// Print writes the objects as `---`-separated YAML documents, each with its comment.
func Print(w io.Writer, objs Objects) error {
	comments := Comments(objs)
	if objs.RoleBinding == nil {
		fmt.Fprintln(w, "# No --user, --group or --serviceaccount: bind the roles yourself (RoleBinding and ClusterRoleBinding).")
	}
	objects := []runtime.Object{objs.Role}
	if objs.RoleBinding != nil {
		objects = append(objects, objs.RoleBinding)
	}
	objects = append(objects, objs.ClusterRole)
	if objs.ClusterRoleBinding != nil {
		objects = append(objects, objs.ClusterRoleBinding)
	}
	extra := map[runtime.Object]string{}
	if objs.GPUMetricsRole != nil {
		objects = append(objects, objs.GPUMetricsRole)
		extra[objs.GPUMetricsRole] = "GPUMetricsRole"
		if objs.GPUMetricsRoleBinding != nil {
			objects = append(objects, objs.GPUMetricsRoleBinding)
			extra[objs.GPUMetricsRoleBinding] = "GPUMetricsRoleBinding"
		}
	}
	for _, obj := range objects {
		kind := obj.GetObjectKind().GroupVersionKind().Kind
		if k, ok := extra[obj]; ok {
			kind = k
		}
		fmt.Fprint(w, "---\n"+comments[kind])
		// A printer per document: the YAML printer writes its own separator from the second on.
		if err := (&printers.YAMLPrinter{}).PrintObj(obj, w); err != nil {
			return err
		}
	}
	return nil
}
