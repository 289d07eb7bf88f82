// Package preflight implements `kubectl tao preflight`: what can be known before a first job
// fails. gather.go reads the cluster (in parallel); checks.go turns what it read into PASS /
// WARN / FAIL lines without the API.
package preflight

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmdutil"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/defaults"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/gpufit"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/printer"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/submit"
)

const example = `  # Is the cluster ready for one 8-GPU job in this namespace?
  kubectl tao preflight --gpus 8

  # Two nodes of 8 GPUs on H100 nodes, with an NGC pull secret, that must start right away
  kubectl tao preflight --gpus 8 --nodes 2 --node-selector nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3 \
    --image-pull-secret ngc --now

  # For scripts: a list of {"name","result","message","fix"}
  kubectl tao preflight -o json`

const long = `Check, before submitting, what usually makes a first GPU job fail: the cluster is reachable,
the namespace exists and you hold every permission kubectl tao needs there, nodes advertise
nvidia.com/gpu and a GPU Operator or device plugin runs, the nodes' driver and CUDA (GPU Feature
Discovery labels) meet the minimums, the server is new enough for multi-node jobs, the job fits,
the pull secret exists, and with --queue that Kueue is installed and the LocalQueue exists
(without --queue, where Kueue is installed, the namespace's LocalQueues are listed).

The fit takes the flags submit takes (--gpus, --nodes, --node-selector, --toleration): a job that
the allocatable GPUs can never hold FAILs; one that fits only once other pods finish WARNs, or
FAILs with --now. Where a defaults file exists (see kubectl tao config view), its values for
these flags apply as they do to submit (flags given win), and a file submit would refuse FAILs.

Each check is PASS, INFO, WARN or FAIL, with the fix when it is not PASS. The exit code is 0 unless
a check FAILs (then 11, PreflightFailed).`

// Options are the flags of `kubectl tao preflight`.
type Options struct {
	GPUs            int
	Nodes           int
	NodeSelector    []string
	Tolerations     []string
	ImagePullSecret string
	Queue           string
	Now             bool

	namespace string
	request   gpufit.Request
	defaults  DefaultsFile
	out       *printer.Flags

	factory cmdutil.Factory
	// getenv locates the defaults file; nil reads none.
	getenv func(string) string
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao preflight`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, getenv func(string) string) *cobra.Command {
	o := &Options{GPUs: 1, Nodes: 1, out: printer.NewFlags(printer.WithTable()), factory: f, getenv: getenv, IOStreams: streams}
	cmd := &cobra.Command{
		Use:                   "preflight [--gpus N] [--nodes N] [--image-pull-secret NAME] [--queue NAME] [--now] [-o json]",
		DisableFlagsInUseLine: true,
		Short:                 "Check that the cluster and namespace are ready for a GPU job",
		Long:                  long,
		Example:               example,
		Args:                  cobra.NoArgs,
		RunE:                  cmdutil.RunE(o),
	}
	fl := cmd.Flags()
	fl.IntVar(&o.GPUs, "gpus", o.GPUs, "GPUs per node the job will ask for (as submit --gpus). 0 skips the fit check.")
	fl.IntVar(&o.Nodes, "nodes", o.Nodes, "Number of nodes (ranks) the job will use (as submit --nodes).")
	fl.StringArrayVar(&o.NodeSelector, "node-selector", o.NodeSelector, "Node label KEY=VALUE the pods must run on (repeatable, as submit).")
	fl.StringArrayVar(&o.Tolerations, "toleration", o.Tolerations, "Toleration KEY[=VALUE]:EFFECT (repeatable, as submit).")
	fl.StringVar(&o.ImagePullSecret, "image-pull-secret", o.ImagePullSecret, "Check that this pull Secret exists and is of type kubernetes.io/dockerconfigjson.")
	fl.StringVar(&o.Queue, "queue", o.Queue, "Check that this Kueue LocalQueue exists in the namespace (as submit --queue).")
	fl.BoolVar(&o.Now, "now", o.Now, "Fail, instead of warning, when the job fits the cluster but not the GPUs free right now.")
	o.out.AddFlags(fl, "a table of checks")
	return cmd
}

// readDefaults applies the defaults file to the flags preflight shares with submit, as submit
// applies it to its own, so that the checks judge the job submit would make. A file submit would
// refuse is not a usage error here but a FAIL line: it is one more thing that makes a job fail.
func (o *Options) readDefaults(cmd *cobra.Command) {
	if o.getenv == nil {
		return
	}
	f, err := defaults.Load(o.getenv, os.ReadFile)
	if err != nil || f == nil {
		o.defaults.Err = err
		return
	}
	o.defaults.Path = f.Path
	// Submit's own flag set, so the check is the one submit makes.
	if err := defaults.Check(f, submit.NewCmd(o.factory, o.IOStreams, nil, nil).LocalFlags()); err != nil {
		o.defaults.Err = err
		return
	}
	o.defaults.Applied, o.defaults.Err = defaults.ApplyShared(f, cmd.LocalFlags())
}

// Complete resolves the namespace and builds the request the way submit does, so that the two
// agree on what a rank needs (GPUs, the multi-node /dev/shm memory, the GPU toleration).
func (o *Options) Complete(cmd *cobra.Command, _ []string) error {
	o.readDefaults(cmd)
	ns, err := o.factory.Namespace()
	if err != nil {
		return err
	}
	o.namespace = ns
	spec := jobspec.Spec{Namespace: ns, GPUs: o.GPUs, Nodes: o.Nodes}
	if spec.NodeSelector, err = jobspec.ParseKeyValues("node-selector", o.NodeSelector); err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	for _, raw := range o.Tolerations {
		t, err := jobspec.ParseToleration(raw)
		if err != nil {
			return exitcode.WithCode(exitcode.Usage, err)
		}
		spec.Tolerations = append(spec.Tolerations, t)
	}
	set := labels.Set{}
	for _, kv := range spec.NodeSelector {
		set[kv.Key] = kv.Value
	}
	o.request = gpufit.Request{Pods: int64(o.Nodes), PerPod: spec.PodRequest(), Selector: labels.SelectorFromSet(set), Tolerations: spec.PodTolerations()}
	return nil
}

// Validate checks the flags without contacting the server.
func (o *Options) Validate() error {
	switch {
	case o.GPUs < 0:
		return exitcode.Usagef("invalid --gpus %d: must be 0 or more", o.GPUs)
	case o.Nodes < 1:
		return exitcode.Usagef("invalid --nodes %d: must be 1 or more", o.Nodes)
	}
	return o.out.Validate()
}

// Run gathers, evaluates, prints, and fails when a check failed.
func (o *Options) Run(ctx context.Context) error {
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return err
	}
	dyn, err := o.factory.DynamicClient()
	if err != nil {
		return err
	}
	facts := Gather(ctx, client, dyn, o.namespace, o.request, o.ImagePullSecret, o.Queue)
	facts.Now = o.Now
	facts.Defaults = o.defaults
	checks := Evaluate(facts)
	if err := o.print(checks); err != nil {
		return err
	}
	var failed []string
	for _, c := range checks {
		if c.Result == Fail {
			failed = append(failed, c.Name)
		}
	}
	if len(failed) > 0 {
		return exitcode.WithCode(exitcode.PreflightFailed, fmt.Errorf("preflight failed: %s", strings.Join(failed, ", ")))
	}
	return nil
}

func (o *Options) print(checks []Check) error {
	if o.out.Human() {
		return o.out.PrintTable(o.Out, Table(checks))
	}
	return o.out.Print(o.Out, checks)
}

// Table renders the checks for the table printer.
func Table(checks []Check) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Check", Type: "string"}, {Name: "Result", Type: "string"},
		{Name: "Detail", Type: "string"}, {Name: "Fix", Type: "string"},
	}}
	for _, c := range checks {
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{c.Name, string(c.Result), c.Message, c.Fix}})
	}
	return t
}
