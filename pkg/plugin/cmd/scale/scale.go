// Package scale implements `kubectl tao scale`: resize an elastic job within its MIN:MAX.
package scale

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobdelete"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobscale"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

// pollInterval is how often --wait reads the Job.
const pollInterval = time.Second

// Options are the flags of `kubectl tao scale`.
type Options struct {
	Nodes           int
	Wait            bool
	Timeout         time.Duration
	NoCapacityCheck bool
	// PrintFlags print the scaled Job as kubectl scale does: "job.batch/NAME scaled", or -o.
	PrintFlags *genericclioptions.PrintFlags

	printer   printers.ResourcePrinter
	name      string
	namespace string
	factory   cmdutil.Factory
	genericiooptions.IOStreams
}

// NewCmd builds `kubectl tao scale`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{factory: f, IOStreams: streams, Timeout: 10 * time.Minute,
		PrintFlags: genericclioptions.NewPrintFlags("scaled").WithTypeSetter(scheme.Scheme)}
	cmd := &cobra.Command{
		Use:   "scale JOB --nodes N",
		Short: "Resize an elastic job (submitted with --nodes MIN:MAX)",
		Long: `Resize an elastic job to N ranks, within the MIN:MAX it was submitted with.

The Job's completions and parallelism change together in one request bound to the Job's UID.
Growing starts the new ranks, which join torchrun's rendezvous: every agent then starts its
workers again at the new world size, from the newest checkpoint. Shrinking removes the highest
ranks; index 0, which hosts the rendezvous, always stays. The capacity guard refuses a size the
cluster's GPUs can never hold.

Exit codes: 0 scaled, 2 not elastic, finished, or N outside MIN:MAX (nothing changed), 3 no
such job, 7 the cluster can never hold N ranks, 8 --wait ran out of time.`,
		Example: `  # Grow an elastic job (submitted with --nodes 1:4) to 4 ranks
  kubectl tao scale ddp --nodes 4

  # Shrink it to 2, and wait until torchrun trains at 2 ranks
  kubectl tao scale ddp --nodes 2 --wait`,
		Args: cmdutil.ExactlyOneJob,
		RunE: cmdutil.RunE(o),
	}
	fl := cmd.Flags()
	fl.IntVar(&o.Nodes, "nodes", 0, "The number of ranks (pods) the job should run, within its MIN:MAX (required).")
	fl.BoolVar(&o.Wait, "wait", false, "Wait until N ranks run and are ready, no removed rank is left, and torchrun's agents have started their workers at the new world size (the rendezvous line in rank 0's log).")
	fl.DurationVar(&o.Timeout, "timeout", o.Timeout, "How long --wait waits.")
	fl.BoolVar(&o.NoCapacityCheck, "no-capacity-check", false, "Scale without checking that the cluster's GPUs can hold N ranks.")
	o.PrintFlags.AddFlags(cmd)
	cmd.ValidArgsFunction = cmdutil.CompleteJobNames(f)
	return cmd
}

// Complete resolves the Job name and the namespace.
func (o *Options) Complete(_ *cobra.Command, args []string) error {
	var err error
	if o.printer, err = o.PrintFlags.ToPrinter(); err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	o.namespace, o.name, err = cmdutil.CompleteJob(o.factory, args)
	return err
}

// Validate checks the flags that need no cluster.
func (o *Options) Validate() error {
	if o.Nodes < 1 {
		return exitcode.Usagef("--nodes N is required, and N must be 1 or more (got %d)", o.Nodes)
	}
	if o.Timeout <= 0 {
		return exitcode.Usagef("invalid --timeout %s: must be more than 0", o.Timeout)
	}
	return nil
}

// Run checks the size against the job and the cluster, patches the Job, and with --wait waits.
func (o *Options) Run(ctx context.Context) error {
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return err
	}
	job, err := jobdelete.GetJob(ctx, client, o.namespace, o.name)
	if err != nil {
		return err
	}
	size, err := jobscale.Check(job, o.Nodes)
	if err != nil {
		return err
	}
	rng := jobspec.FormatNodesRange(size.Min, size.Max)
	since := metav1.Time{}
	if o.Nodes > size.Ranks && !o.NoCapacityCheck {
		warning, err := jobscale.CheckCapacity(ctx, client, job, o.Nodes)
		if err != nil {
			return err
		}
		if warning != "" {
			fmt.Fprintf(o.ErrOut, "Warning: %s\n", warning)
		}
	}
	if o.Nodes == size.Ranks {
		fmt.Fprintf(o.ErrOut, "job.batch/%s already has %s (elastic %s)\n", o.name, plural.N(o.Nodes, "rank"), rng)
	} else {
		// Rank 0's log is read from here on, less a second (the log's timestamps are whole
		// seconds): a rendezvous at the new size comes after the patch.
		since = metav1.NewTime(time.Now().Add(-time.Second))
		if job, err = jobscale.Scale(ctx, client, job, o.Nodes); err != nil {
			return err
		}
		fmt.Fprintf(o.ErrOut, "job.batch/%s: from %d to %s (elastic %s)\n", o.name, size.Ranks, plural.N(o.Nodes, "rank"), rng)
	}
	if err := o.printer.PrintObj(job, o.Out); err != nil {
		return err
	}
	if !o.Wait {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	last, err := jobscale.WaitRunning(wctx, client, job, o.Nodes, pollInterval)
	switch {
	case err == nil:
		fmt.Fprintf(o.ErrOut, "job.batch/%s runs %s\n", o.name, plural.N(o.Nodes, "rank"))
		return o.waitTrained(ctx, wctx, client, last, since)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		ready := ptr.Deref(last.Status.Ready, 0)
		return exitcode.WithCode(exitcode.Timeout, fmt.Errorf("job.batch/%s: %d of %d ranks ready, %d active, after %s; `kubectl tao status %s -n %s` shows why",
			o.name, ready, o.Nodes, last.Status.Active, o.Timeout, o.name, o.namespace))
	default:
		return err
	}
}

// waitTrained waits, after the ranks run, until torchrun's agents have started their workers at
// the new world size: the rendezvous line in rank 0's log.
func (o *Options) waitTrained(ctx, wctx context.Context, client kubernetes.Interface, job *batchv1.Job, since metav1.Time) error {
	seen, err := jobscale.WaitTrained(wctx, client, job, o.Nodes, since, pollInterval)
	switch {
	case err == nil:
		fmt.Fprintf(o.ErrOut, "job.batch/%s trains at %s (torchrun's rendezvous in rank 0: group_world_size=%d)\n", o.name, plural.N(o.Nodes, "rank"), o.Nodes)
		return nil
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		said := "no rendezvous since the change"
		if seen >= 0 {
			said = fmt.Sprintf("the last at group_world_size=%d", seen)
		}
		return exitcode.WithCode(exitcode.Timeout, fmt.Errorf("job.batch/%s: %d ranks run, but rank 0's torchrun logged %s within %s (does the command run torchrun? `kubectl tao logs %s -n %s --rank 0`)",
			o.name, o.Nodes, said, o.Timeout, o.name, o.namespace))
	default:
		return err
	}
}
