// Package preflight implements `kubectl tao preflight`: its flags, the defaults file and the
// environment read for preflightcheck, which reads the cluster and judges it, and the table or
// -o output of the checks.
package preflight

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/gpufit"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/preflightcheck"
	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/defaults"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/jobflags"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/printer"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

const example = `  # Is the cluster ready for one 8-GPU job in this namespace?
  kubectl tao preflight --gpus 8

  # Two nodes of 8 GPUs on H100 nodes, with an NGC pull secret, that must start right away
  kubectl tao preflight --gpus 8 --nodes 2 --node-selector nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3 \
    --image-pull-secret ngc --now

  # For scripts: a list of {"name","result","message","fix"}
  kubectl tao preflight -o json`

const long = `Check, before submitting, what usually makes a first GPU job fail: the cluster, your
permissions in the namespace, the GPUs and their driver, whether the job fits, its pull secret
and, with --queue, its Kueue queue. The job is described by submit's flags for its shape, and
by the defaults file as submit would read it.

Each check is PASS, INFO, WARN or FAIL, with the fix when it is not PASS; the exit code is 0
unless a check FAILs (then 11).

Guide: https://github.com/kubectl-tao/kubectl-tao/blob/main/docs/preflight.md`

// Options are the flags of `kubectl tao preflight`.
type Options struct {
	// The job's shape, declared once with submit's: the same flags and defaults-file keys.
	jobflags.Shape
	Now bool

	spec     jobspec.Spec
	defaults preflightcheck.DefaultsFile
	out      *printer.Flags

	factory cmdutil.Factory
	// getenv locates the defaults file; nil reads none.
	getenv func(string) string
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao preflight`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, getenv func(string) string) *cobra.Command {
	o := &Options{Shape: jobflags.NewShape(), out: printer.NewFlags(printer.WithTable()), factory: f, getenv: getenv, IOStreams: streams}
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
	o.AddFlags(fl) // jobflags.Shape: the shape flags, as submit declares them
	fl.BoolVar(&o.Now, "now", o.Now, "Fail, instead of warning, when the job fits the cluster but not the GPUs free right now.")
	o.out.AddFlags(fl, "a table of checks")
	return cmd
}

// readDefaults applies the defaults file to the shape flags, as submit applies it to its own,
// so that the checks judge the job submit would make. A file submit would refuse is not a usage
// error here but a FAIL line: it is one more thing that makes a job fail.
func (o *Options) readDefaults(cmd *cobra.Command) {
	if o.getenv == nil {
		return
	}
	o.defaults.EnvVar = defaults.EnvConfig
	f, err := defaults.Load(o.getenv, os.ReadFile)
	if err != nil || f == nil {
		o.defaults.Err = err
		return
	}
	o.defaults.Path = f.Path
	// Submit's job flags, declared once in jobflags, so the check is the one submit makes.
	if err := defaults.Check(f, jobflags.FlagSet()); err != nil {
		o.defaults.Err = err
		return
	}
	o.defaults.Applied, o.defaults.Err = defaults.ApplyShared(f, cmd.LocalFlags())
}

// Complete applies the defaults file, resolves the namespace and turns the shape flags into the
// spec submit would build, so that the two agree on what a rank needs (GPUs, CPU, memory with
// the multi-node /dev/shm, extended resources, the GPU toleration).
func (o *Options) Complete(cmd *cobra.Command, _ []string) error {
	o.readDefaults(cmd)
	ns, err := o.factory.Namespace()
	if err != nil {
		return err
	}
	o.spec = jobspec.Spec{Namespace: ns}
	if err := o.Shape.Complete(&o.spec); err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	return nil
}

// Validate checks the flags without contacting the server.
func (o *Options) Validate() error {
	// A shape submit would refuse (a bad quantity, say) is a usage error, as it is for submit;
	// a shape set by the defaults file is already judged by the defaults file check.
	if err := o.spec.ValidateShape(); err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
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
	facts := preflightcheck.Gather(ctx, preflightcheck.Targets{
		Client: client, Dynamic: dyn, Namespace: o.spec.Namespace, Request: gpufit.RequestFor(&o.spec),
		PullSecrets: o.spec.ImagePullSecrets, Queue: o.spec.Queue,
	})
	facts.Now = o.Now
	facts.Defaults = o.defaults
	facts.SkipNodeRuntime = o.getenv != nil && o.getenv(preflightcheck.EnvSkipNodeRuntimeCheck) == "1"
	checks := preflightcheck.Evaluate(facts)
	if err := o.print(checks); err != nil {
		return err
	}
	var failed []string
	for _, c := range checks {
		if c.Result == preflightcheck.Fail {
			failed = append(failed, c.Name)
		}
	}
	if len(failed) > 0 {
		return exitcode.WithCode(exitcode.PreflightFailed, fmt.Errorf("preflight failed: %s", strings.Join(failed, ", ")))
	}
	return nil
}

func (o *Options) print(checks []preflightcheck.Check) error {
	if o.out.Human() {
		return o.out.PrintTable(o.Out, Table(checks))
	}
	return o.out.Print(o.Out, checks)
}

// Table renders the checks for the table printer.
func Table(checks []preflightcheck.Check) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Check", Type: "string"}, {Name: "Result", Type: "string"},
		{Name: "Detail", Type: "string"}, {Name: "Fix", Type: "string"},
	}}
	for _, c := range checks {
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{c.Name, string(c.Result), c.Message, c.Fix}})
	}
	return t
}
