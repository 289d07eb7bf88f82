// Package submit implements `kubectl tao submit`: the cobra glue, and the thin layer that
// checks capacity and creates the objects jobspec builds.
package submit

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmdutil"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/logs"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/wait"
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

Pods that ask for GPUs tolerate the nvidia.com/gpu:NoSchedule taint that GPU node pools carry
(--no-gpu-toleration drops it). Multi-node jobs get a 16Gi memory-backed /dev/shm unless
--shm-size says otherwise; it counts toward the pod's memory.

Without NAME, a name "tao-" plus 5 random characters is chosen.

Defaults for any of these flags (but --dry-run, -o, --wait, --follow and --file) can be kept in
$XDG_CONFIG_HOME/kubectl-tao/config.yaml (~/.config/kubectl-tao/config.yaml, or the file
$TAO_CONFIG names), under "submit:" with the flags' names as keys. A flag on the command line
wins; for a repeatable flag, the command line's values replace the file's list. --dry-run=client
-o yaml shows the result. A broken file is a usage error (exit 2) naming the file and line.`

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
	Wait             bool
	Follow           bool
	CPU              string
	Memory           string
	ShmSize          string
	Deadline         time.Duration
	PriorityClass    string
	ServiceAccount   string
	Resources        []string
	OneRankPerNode   bool
	Tolerations      []string
	NoGPUToleration  bool
	Volumes          []string
	Files            []string

	// Set by Complete.
	spec    jobspec.Spec
	dryRun  cmdutil.DryRun
	ttlSet  bool
	printer printers.ResourcePrinter

	factory    cmdutil.Factory
	randomName func() string
	defaults   defaultsFile
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

// NewCmd builds `kubectl tao submit`. getenv locates the defaults file.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, randomName func() string, getenv func(string) string) *cobra.Command {
	o := NewOptions(f, streams, randomName)
	o.defaults.getenv = getenv
	cmd := &cobra.Command{
		Use:                   "submit [NAME] --image IMAGE [flags] -- COMMAND [ARG...]",
		DisableFlagsInUseLine: true,
		Short:                 "Submit a single or multi-node GPU training job",
		Long:                  long,
		Example:               example,
		Args:                  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(cmd, args); err != nil {
				return o.defaults.explain(err)
			}
			if err := o.Validate(); err != nil {
				return o.defaults.explain(err)
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
	fl.StringVar(&o.CPU, "cpu", o.CPU, "CPU request and limit of each pod, a Kubernetes quantity (e.g. 32, 500m).")
	fl.StringVar(&o.Memory, "memory", o.Memory, "Memory request and limit of each pod (e.g. 256Gi). A memory-backed /dev/shm counts toward it.")
	fl.StringVar(&o.ShmSize, "shm-size", o.ShmSize, "Size of a memory-backed /dev/shm (e.g. 16Gi); it counts toward --memory and toward node memory in the capacity check. Default: "+jobspec.DefaultMultiNodeShmSize+" for multi-node jobs, none for one node; 0 for none.")
	fl.DurationVar(&o.Deadline, "deadline", 0, "Fail the Job if it runs longer than this (activeDeadlineSeconds), e.g. 72h.")
	fl.StringVar(&o.PriorityClass, "priority-class", o.PriorityClass, "PriorityClass of the pods.")
	fl.StringVar(&o.ServiceAccount, "service-account", o.ServiceAccount, "ServiceAccount the pods run as.")
	fl.StringArrayVar(&o.Resources, "resource", o.Resources, "Extended resource NAME=QUANTITY per pod, e.g. rdma/ib=1 or nvidia.com/mig-1g.10gb=1 (repeatable).")
	fl.BoolVar(&o.OneRankPerNode, "one-rank-per-node", o.OneRankPerNode, "Spread a multi-node job's pods over distinct nodes (topology spread on the hostname).")
	fl.StringArrayVar(&o.Tolerations, "toleration", o.Tolerations, "Toleration KEY[=VALUE]:EFFECT, e.g. dedicated=ml:NoSchedule (repeatable). Pods asking for GPUs tolerate nvidia.com/gpu:NoSchedule by default.")
	fl.BoolVar(&o.NoGPUToleration, "no-gpu-toleration", o.NoGPUToleration, "Do not add the default toleration of the nvidia.com/gpu:NoSchedule taint.")
	fl.StringArrayVar(&o.Volumes, "volume", o.Volumes, "PersistentVolumeClaim to mount, CLAIM:MOUNT_PATH[:ro] (repeatable). A volume at /results sets TAO_RESULTS_ROOT=/results.")
	fl.StringArrayVar(&o.Files, "file", o.Files, "Local file to ship with the job, LOCAL_PATH:CONTAINER_PATH (repeatable), e.g. a TAO spec file. Carried in a ConfigMap owned by the Job, 1 MiB in all.")
	fl.BoolVar(&o.NoCapacityCheck, "no-capacity-check", o.NoCapacityCheck, "Skip the check that the cluster's allocatable GPUs can hold the job.")
	fl.BoolVar(&o.Wait, "wait", o.Wait, "After creating the job, wait until it ends, as `kubectl tao wait` does (progress on stderr, exit code of the outcome).")
	fl.BoolVar(&o.Follow, "follow", o.Follow, "After creating the job, follow every rank's log as `kubectl tao logs -f` does (exit code of the outcome); Ctrl-C detaches, the job keeps running.")
	cmdutil.AddDryRunFlag(cmd, &o.DryRunFlag)
	o.PrintFlags.AddFlags(cmd)
	return cmd
}

// Complete applies the defaults file, splits the arguments at "--", resolves the namespace and
// turns flag strings into a jobspec.Spec. It does not contact the server.
func (o *Options) Complete(cmd *cobra.Command, args []string) error {
	if err := o.defaults.apply(cmd); err != nil {
		return err
	}
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
		CPU:              o.CPU,
		Memory:           o.Memory,
		ShmSize:          o.ShmSize,
		PriorityClass:    o.PriorityClass,
		ServiceAccount:   o.ServiceAccount,
		OneRankPerNode:   o.OneRankPerNode,
		NoGPUToleration:  o.NoGPUToleration,
	}
	if o.ttlSet {
		o.spec.TTL = &o.TTL
	}
	if cmd.Flags().Changed("deadline") {
		o.spec.Deadline = &o.Deadline
	}
	for _, raw := range o.Volumes {
		v, err := jobspec.ParseVolume(raw)
		if err != nil {
			return exitcode.WithCode(exitcode.Usage, err)
		}
		o.spec.Volumes = append(o.spec.Volumes, v)
	}
	if o.spec.Files, err = readFiles(o.Files); err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	for _, raw := range o.Tolerations {
		t, err := jobspec.ParseToleration(raw)
		if err != nil {
			return exitcode.WithCode(exitcode.Usage, err)
		}
		o.spec.Tolerations = append(o.spec.Tolerations, t)
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
		{"resource", o.Resources, &o.spec.Resources},
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
	if o.Follow && (o.Wait || o.dryRun != cmdutil.DryRunNone) {
		return exitcode.Usagef("--follow cannot be combined with --wait (it already waits) or --dry-run (nothing would run)")
	}
	if o.Wait && o.dryRun != cmdutil.DryRunNone {
		return exitcode.Usagef("--wait cannot be combined with --dry-run: nothing would run")
	}
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
	if o.Follow {
		logStreams := o.IOStreams
		// When following, stdout carries only log lines: the created objects are named on stderr.
		o.Out = o.ErrOut
		if err := o.print(created); err != nil {
			return err
		}
		return logs.FollowSubmitted(ctx, client, created.Job.Namespace, created.Job.Name, logStreams)
	}
	if err := o.print(created); err != nil || !o.Wait {
		return err
	}
	streams := o.IOStreams
	if *o.PrintFlags.OutputFormat != "" {
		// stdout already holds the requested -o output; a status line would corrupt it.
		streams.Out = io.Discard
	}
	target := wait.Target{Namespace: created.Job.Namespace, Name: created.Job.Name, UID: created.Job.UID}
	return wait.Wait(cmd, client, target, 0, nil, clock.RealClock{}, streams)
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

// readFiles reads every --file. Directories, unreadable files and anything over the ConfigMap
// limit are refused before the whole file is read.
func readFiles(flags []string) ([]jobspec.File, error) {
	var files []jobspec.File
	for _, raw := range flags {
		local, container, err := jobspec.ParseFileFlag(raw)
		if err != nil {
			return nil, err
		}
		info, err := os.Stat(local)
		switch {
		case err != nil:
			return nil, fmt.Errorf("--file %s: %w", local, err)
		case info.IsDir():
			return nil, fmt.Errorf("--file %s: is a directory; ship directories in a volume (--volume) or S3", local)
		case !info.Mode().IsRegular():
			return nil, fmt.Errorf("--file %s: not a regular file", local)
		case info.Size() > jobspec.MaxFilesBytes:
			return nil, fmt.Errorf("--file %s: %d bytes, more than the %d a ConfigMap can hold", local, info.Size(), jobspec.MaxFilesBytes)
		}
		data, err := os.ReadFile(local)
		if err != nil {
			return nil, fmt.Errorf("--file %s: %w", local, err)
		}
		files = append(files, jobspec.File{Source: local, ContainerPath: container, Data: data})
	}
	return files, nil
}
