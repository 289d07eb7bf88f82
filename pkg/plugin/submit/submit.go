// Package submit implements `kubectl tao submit`: the cobra glue, and the thin layer that
// checks capacity and creates the objects jobspec builds.
package submit

import (
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmdutil"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/jobspec"
)

const example = `  # One node, 8 GPUs, a bash command string (run as /bin/bash -c, like the TAO SDK)
  kubectl tao submit train-1 --image nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt --gpus 8 -- \
    'dino train -e /specs/train.yaml results_dir=/results'

  # Two nodes x 8 GPUs with torchrun: the rendezvous variables are set for every rank
  kubectl tao submit ddp --image pytorch/pytorch:latest --gpus 8 --nodes 2 -- \
    'torchrun --nnodes $NNODES --nproc-per-node $NPROC_PER_NODE --node-rank $NODE_RANK \
       --master-addr $MASTER_ADDR --master-port $MASTER_PORT train.py'

  # An argv is passed on exactly as typed: no shell re-parses it
  kubectl tao submit --image python:3.13 --gpus 0 -- python -c 'print("hello, world")'

  # See the objects without creating anything (no cluster needed)
  kubectl tao submit demo --image busybox --gpus 1 --nodes 2 --dry-run=client -o yaml -- sleep 10`

const long = `Submit a GPU training job as a Kubernetes Job.

Everything after "--" is the command. A single argument is a bash command string, run as
/bin/bash -c COMMAND (as the TAO SDK does); several arguments are an argv, passed on exactly as
typed. Either way the command is exec'd, so it receives SIGTERM when the job is canceled. Text
reaches the container literally: kubectl-tao escapes the kubelet's $(VAR) expansion in the
command and in --env values.

The Job has restartPolicy Never and backoffLimit 0: a failure surfaces instead of being retried.
With --nodes N > 1 it is an Indexed Job of N pods plus a headless Service named after the job,
and every rank gets WORLD_SIZE and NNODES (N), NUM_GPU_PER_NODE and NPROC_PER_NODE (--gpus),
NODE_RANK (its index, 0..N-1), MASTER_ADDR (NAME-0.NAME) and MASTER_PORT (--master-port).

Before creating anything, submit checks that the cluster's allocatable GPUs can ever hold the
job: N ranks of --gpus GPUs each, a rank never spanning nodes. The objects are created
atomically: if any step fails, what was created is removed again.

Without NAME, a name "tao-" plus 5 random characters is chosen.`

// Options are the flags and arguments of `kubectl tao submit`.
type Options struct {
	PrintFlags *genericclioptions.PrintFlags

	Name             string
	Image            string
	Command          []string
	GPUs             int
	Nodes            int
	Env              []string
	EnvFromSecrets   []string
	ImagePullSecrets []string
	NodeSelector     []string
	Labels           []string
	Annotations      []string
	MasterPort       int
	TTL              time.Duration
	NoCapacityCheck  bool
	DryRunFlag       string

	// Set by Complete.
	spec    jobspec.Spec
	dryRun  cmdutil.DryRun
	ttlSet  bool
	printer printers.ResourcePrinter
	client  kubernetes.Interface

	factory    cmdutil.Factory
	randomName func() string
	genericiooptions.IOStreams
}

// NewOptions returns options with the defaults of the flags.
func NewOptions(f cmdutil.Factory, streams genericiooptions.IOStreams, randomName func() string) *Options {
	return &Options{
		PrintFlags: genericclioptions.NewPrintFlags("created").WithTypeSetter(scheme.Scheme),
		GPUs:       1,
		Nodes:      1,
		MasterPort: jobspec.DefaultMasterPort,
		DryRunFlag: string(cmdutil.DryRunNone),
		factory:    f,
		randomName: randomName,
		IOStreams:  streams,
	}
}

// NewCmd builds `kubectl tao submit`.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, randomName func() string) *cobra.Command {
	o := NewOptions(f, streams, randomName)
	cmd := &cobra.Command{
		Use:                   "submit [NAME] --image IMAGE [flags] -- COMMAND [ARG...]",
		DisableFlagsInUseLine: true,
		Short:                 "Submit a single or multi-node GPU training job",
		Long:                  long,
		Example:               example,
		Args:                  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(cmd, args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Image, "image", o.Image, "Container image to run (required).")
	fl.IntVar(&o.GPUs, "gpus", o.GPUs, "GPUs per node (nvidia.com/gpu limit of each pod). 0 sets no GPU limit and skips the capacity check.")
	fl.IntVar(&o.Nodes, "nodes", o.Nodes, "Number of nodes (pods, ranks). More than 1 makes an Indexed Job with a headless Service for the rendezvous.")
	fl.StringArrayVar(&o.Env, "env", o.Env, "Environment variable KEY=VALUE for the command (repeatable). The value arrives literally.")
	fl.StringArrayVar(&o.EnvFromSecrets, "env-from-secret", o.EnvFromSecrets, "Name of a Secret whose keys become environment variables (repeatable).")
	fl.StringArrayVar(&o.ImagePullSecrets, "image-pull-secret", o.ImagePullSecrets, "Name of a pre-created image pull Secret, e.g. for nvcr.io (repeatable).")
	fl.StringArrayVar(&o.NodeSelector, "node-selector", o.NodeSelector, "Node label KEY=VALUE the pods must run on (repeatable).")
	fl.StringArrayVar(&o.Labels, "label", o.Labels, "Label KEY=VALUE for the Job and its pods (repeatable).")
	fl.StringArrayVar(&o.Annotations, "annotation", o.Annotations, "Annotation KEY=VALUE for the Job and its pods (repeatable).")
	fl.IntVar(&o.MasterPort, "master-port", o.MasterPort, "Rendezvous port of rank 0 (MASTER_PORT) for multi-node jobs.")
	fl.DurationVar(&o.TTL, "ttl", 0, "Delete the Job this long after it finishes (ttlSecondsAfterFinished), e.g. 1h. Unset: finished Jobs are kept.")
	fl.BoolVar(&o.NoCapacityCheck, "no-capacity-check", o.NoCapacityCheck, "Skip the check that the cluster's allocatable GPUs can hold the job.")
	cmdutil.AddDryRunFlag(cmd, &o.DryRunFlag)
	o.PrintFlags.AddFlags(cmd)
	return cmd
}

// Complete splits the arguments at "--", resolves the namespace and turns flag strings into a
// jobspec.Spec. It does not contact the server.
func (o *Options) Complete(cmd *cobra.Command, args []string) error {
	dash := cmd.ArgsLenAtDash()
	names := args
	if dash >= 0 {
		names, o.Command = args[:dash], args[dash:]
	}
	switch len(names) {
	case 0:
		o.Name = "tao-" + o.randomName()
	case 1:
		o.Name = names[0]
	default:
		return exitcode.Usagef("expected at most one NAME before \"--\", got %d: %s (put the command after \"--\")",
			len(names), strings.Join(names, " "))
	}
	o.ttlSet = cmd.Flags().Changed("ttl")

	var err error
	if o.dryRun, err = cmdutil.ParseDryRun(o.DryRunFlag); err != nil {
		return err
	}
	switch o.dryRun {
	case cmdutil.DryRunClient:
		err = o.PrintFlags.Complete("%s (dry run)")
	case cmdutil.DryRunServer:
		err = o.PrintFlags.Complete("%s (server dry run)")
	}
	if err != nil {
		return err
	}
	if o.printer, err = o.PrintFlags.ToPrinter(); err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}

	ns, err := o.factory.Namespace()
	if err != nil {
		return err
	}
	o.spec = jobspec.Spec{
		Name:             o.Name,
		Namespace:        ns,
		Image:            o.Image,
		Command:          o.Command,
		GPUs:             o.GPUs,
		Nodes:            o.Nodes,
		EnvFromSecrets:   o.EnvFromSecrets,
		ImagePullSecrets: o.ImagePullSecrets,
		MasterPort:       o.MasterPort,
	}
	if o.ttlSet {
		o.spec.TTL = &o.TTL
	}
	for _, p := range []struct {
		flag   string
		values []string
		into   *[]jobspec.KeyValue
	}{
		{"env", o.Env, &o.spec.Env},
		{"node-selector", o.NodeSelector, &o.spec.NodeSelector},
		{"label", o.Labels, &o.spec.Labels},
		{"annotation", o.Annotations, &o.spec.Annotations},
	} {
		kvs, err := jobspec.ParseKeyValues(p.flag, p.values)
		if err != nil {
			return exitcode.WithCode(exitcode.Usage, err)
		}
		*p.into = kvs
	}
	return nil
}

// Validate checks the spec without contacting the server.
func (o *Options) Validate() error {
	return exitcode.WithCode(exitcode.Usage, o.spec.Validate())
}

// Run checks capacity and creates the objects, or only prints them for a client dry run.
func (o *Options) Run(cmd *cobra.Command) error {
	objs := jobspec.Build(o.spec)
	if o.dryRun == cmdutil.DryRunClient {
		return o.print(objs)
	}
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if !o.NoCapacityCheck && o.spec.GPUs > 0 {
		if err := checkCapacity(ctx, client, o.spec, o.ErrOut); err != nil {
			return err
		}
	}
	created, err := create(ctx, client, objs, o.dryRun == cmdutil.DryRunServer)
	if err != nil {
		return err
	}
	return o.print(created)
}

func (o *Options) print(objs jobspec.Objects) error {
	// The name printer (the default "job.batch/NAME created" and -o name) prints one line per
	// object; every other format prints one v1 List holding them all, as kubectl does.
	if format := *o.PrintFlags.OutputFormat; format != "" && format != "name" {
		list, err := toList(objs.All())
		if err != nil {
			return err
		}
		return o.printer.PrintObj(list, o.Out)
	}
	for _, obj := range objs.All() {
		if err := o.printer.PrintObj(obj, o.Out); err != nil {
			return err
		}
	}
	return nil
}

// selector returns the --node-selector as a label selector for the capacity check.
func selector(s jobspec.Spec) labels.Selector {
	set := labels.Set{}
	for _, kv := range s.NodeSelector {
		set[kv.Key] = kv.Value
	}
	return labels.SelectorFromSet(set)
}
