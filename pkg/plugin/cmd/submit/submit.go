// Package submit implements `kubectl tao submit`: its flags, the spec they make (jobspec), and
// the report of what jobcreate created, followed with --wait or --follow.
package submit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/jobflags"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobcreate"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobwait"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/kueue"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/credentials"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/redact"
)

const example = `  # One node, 8 GPUs, a bash command string (run as /bin/bash -c, like the TAO SDK)
  kubectl tao submit train-1 --image nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt --gpus 8 -- \
    'dino train -e /specs/train.yaml results_dir=/results'

  # Two nodes x 8 GPUs with torchrun, each rank running in a snapshot of ./src
  kubectl tao submit ddp --image pytorch/pytorch:latest --gpus 8 --nodes 2 --workdir ./src -- \
    'torchrun --nnodes $NNODES --nproc-per-node $NPROC_PER_NODE --node-rank $NODE_RANK \
       --master-addr $MASTER_ADDR --master-port $MASTER_PORT train.py'

  # Inputs from S3 before the command, /results to S3 after it (credentials from this shell)
  kubectl tao submit dino --image IMAGE --gpus 8 --input /data=s3://datasets/coco/ --output-path /results -- 'train.sh'

  # See the objects without creating anything (no cluster needed)
  kubectl tao submit demo --image busybox --gpus 1 --nodes 2 --dry-run=client -o yaml -- sleep 10`

const long = `Submit a GPU training job as a Kubernetes Job: one pod per node (rank), plus a headless
Service and the rendezvous variables for every rank when --nodes is more than 1. Everything
after "--" is the command: one argument is a bash command string, several are an argv passed
on exactly as typed. Nothing is created unless the cluster can ever hold the job.

Guide: https://github.com/kubectl-tao/kubectl-tao/blob/main/docs/training.md`

// Options are the flags and arguments of `kubectl tao submit`.
type Options struct {
	PrintFlags *genericclioptions.PrintFlags

	// The flags that describe the job, declared once for submit, preflight and config view.
	jobflags.Job

	Name       string
	Command    []string
	DryRunFlag string
	Wait       bool
	Follow     bool
	// StuckTimeout is --stuck-timeout, for --wait and --follow.
	StuckTimeout time.Duration
	// ResumeFrom and ResumeFromUID name the earlier run whose checkpoints the job starts from.
	ResumeFrom, ResumeFromUID string

	// Set by Complete.
	spec    jobspec.Spec
	dryRun  cmdutil.DryRun
	ttlSet  bool
	printer printers.ResourcePrinter
	// workdir is --workdir, packed (nil without it).
	workdir *packedWorkdir

	factory    cmdutil.Factory
	clock      clock.PassiveClock
	randomName func() string
	getenv     func(string) string
	// version picks the default --stager-image.
	version  string
	defaults defaultsFile
	genericiooptions.IOStreams
}

// NewOptions returns options with the defaults of the flags. clk is the "now" of what submit
// prints after --wait; version is this build's (`kubectl tao version`), which picks the default
// --stager-image.
func NewOptions(f cmdutil.Factory, streams genericiooptions.IOStreams, clk clock.PassiveClock, randomName func() string, getenv func(string) string, version string) *Options {
	return &Options{
		PrintFlags: genericclioptions.NewPrintFlags("created").WithTypeSetter(scheme.Scheme),
		Job:        jobflags.NewJob(),
		DryRunFlag: string(cmdutil.DryRunNone),
		factory:    f,
		clock:      clk,
		randomName: randomName,
		getenv:     getenv,
		version:    version,
		IOStreams:  streams,
	}
}

// NewCmd builds `kubectl tao submit`. getenv gives the S3 credentials and locates the defaults file.
func NewCmd(f cmdutil.Factory, streams genericiooptions.IOStreams, clk clock.PassiveClock, randomName func() string, getenv func(string) string, version string) *cobra.Command {
	o := NewOptions(f, streams, clk, randomName, getenv, version)
	o.defaults.getenv = getenv
	cmd := &cobra.Command{
		Use:                   "submit [NAME] --image IMAGE [flags] -- COMMAND [ARG...]",
		DisableFlagsInUseLine: true,
		Short:                 "Submit a single or multi-node GPU training job",
		Long:                  long,
		Example:               example,
		Args:                  cobra.ArbitraryArgs,
		RunE:                  cmdutil.RunE(o),
	}
	fl := cmd.Flags()
	o.AddFlags(fl) // jobflags.Job: every flag that describes the job
	fl.BoolVar(&o.Wait, "wait", o.Wait, "After creating the job, wait until it ends, as 'kubectl tao wait' does (progress on stderr, exit code of the outcome).")
	fl.BoolVar(&o.Follow, "follow", o.Follow, "After creating the job, follow every rank's log as 'kubectl tao logs -f' does (exit code of the outcome); Ctrl-C detaches, the job keeps running.")
	jobwait.AddStuckTimeoutFlag(fl, &o.StuckTimeout)
	fl.StringVar(&o.ResumeFrom, "resume-from", o.ResumeFrom, "With --checkpoint-dir, start from the checkpoints of an earlier job of this name (its run in S3, also once the Job is gone) instead of from step 0.")
	fl.StringVar(&o.ResumeFromUID, "resume-from-uid", o.ResumeFromUID, "The run of --resume-from to start from, when that name had several runs (see `kubectl tao results NAME`).")
	cmdutil.AddDryRunFlag(cmd, &o.DryRunFlag)
	o.PrintFlags.AddFlags(cmd)
	return cmd
}

// Complete applies the defaults file, splits the arguments at "--", resolves the namespace and
// turns flag strings into a jobspec.Spec. It does not contact the server. A usage error names
// the defaults file when it set any flag: the user may not know that it did.
func (o *Options) Complete(cmd *cobra.Command, args []string) error {
	return o.defaults.explain(o.complete(cmd, args))
}

func (o *Options) complete(cmd *cobra.Command, args []string) error {
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
	if o.dryRun, err = cmdutil.CompleteDryRun(o.DryRunFlag, o.PrintFlags); err != nil {
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
		Name:           o.Name,
		Namespace:      ns,
		Image:          o.Image,
		Command:        o.Command,
		EnvFromSecrets: o.EnvFromSecrets,
		MasterPort:     o.MasterPort,
		PriorityClass:  o.PriorityClass,
		ServiceAccount: o.ServiceAccount,
		OneRankPerNode: o.OneRankPerNode,
		Retries:        o.Retries,
		Launcher:       o.Launcher,
		SlotsPerNode:   o.SlotsPerNode,
	}
	if err := o.Shape.Complete(&o.spec); err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	if o.ttlSet {
		o.spec.TTL = &o.TTL
	}
	if cmd.Flags().Changed("deadline") {
		o.spec.Deadline = &o.Deadline
	}
	if cmd.Flags().Changed("termination-grace-period") {
		o.spec.TerminationGracePeriod = &o.TerminationGracePeriod
	}
	if o.spec.MPI() {
		if o.spec.MPIKey, err = newMPIKey(); err != nil {
			return err
		}
		if o.spec.MPISSH() {
			if o.spec.SSHKeys, err = jobspec.NewSSHKeys(rand.Reader); err != nil {
				return err
			}
		}
	}
	o.warn(jobspec.SlotsWarning(o.spec))
	if o.spec.Elastic() && !cmd.Flags().Changed("retries") {
		// A lost rank's pod is started again instead of failing the job: what elastic is for.
		o.spec.Retries = jobspec.DefaultElasticRetries
	}
	if err := jobspec.ValidateHangTimeout(o.HangTimeout); err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	o.spec.HangTimeout = o.HangTimeout
	if o.HangTimeout > 0 && o.Retries == 0 {
		fmt.Fprintf(o.ErrOut, "Warning: --hang-timeout without --retries fails the job on a hang instead of starting it again\n")
	} else if o.HangTimeout > 0 && o.CheckpointDir == "" {
		fmt.Fprintf(o.ErrOut, "Warning: --hang-timeout without --checkpoint-dir starts a hung job again from its first step\n")
	}
	if cmd.Flags().Changed("status-file") {
		if err := jobspec.ValidateStatusFile(o.StatusFile); err != nil {
			return exitcode.WithCode(exitcode.Usage, err)
		}
		o.spec.StatusFile = &o.StatusFile
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
	if o.spec.Staging, err = o.completeStaging(cmd); err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	if err := o.completeWorkdir(cmd); err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	for _, p := range []struct {
		flag   string
		values []string
		into   *[]jobspec.KeyValue
	}{
		{"env", o.Env, &o.spec.Env},
		{"label", o.Labels, &o.spec.Labels},
		{"annotation", o.Annotations, &o.spec.Annotations},
	} {
		kvs, err := jobspec.ParseKeyValues(p.flag, p.values)
		if err != nil {
			return exitcode.WithCode(exitcode.Usage, err)
		}
		*p.into = kvs
	}
	o.spec.EnvAllow = o.EnvAllow
	if o.spec.SecretEnv, err = o.completeSecretEnv(); err != nil {
		return exitcode.WithCode(exitcode.Usage, err)
	}
	return nil
}

// completeSecretEnv reads the --secret-env values from this shell: an unset one stops submit
// here, before anything is sent.
func (o *Options) completeSecretEnv() ([]jobspec.KeyValue, error) {
	refs, err := credentials.ParseRefs("secret-env", o.SecretEnv)
	if err != nil {
		return nil, err
	}
	vals, err := credentials.Resolve("secret-env", o.getenv, refs)
	if err != nil {
		return nil, err
	}
	var out []jobspec.KeyValue
	for _, v := range vals {
		out = append(out, jobspec.KeyValue{Key: v.Name, Value: v.Value})
	}
	return out, nil
}

// completeStaging turns --input, --output-path, --checkpoint-dir, --s3-secret and --stager-image
// into the spec's staging, with the credentials from the shell unless --s3-secret names a
// Secret. nil without --input, --output-path and --checkpoint-dir.
func (o *Options) completeStaging(cmd *cobra.Command) (*jobspec.Staging, error) {
	if o.CheckpointDir == "" {
		for _, flag := range []string{"checkpoint-keep", "checkpoint-pattern"} {
			if cmd.Flags().Changed(flag) {
				return nil, fmt.Errorf("--%s only applies with --checkpoint-dir", flag)
			}
		}
	}
	if len(o.Inputs) == 0 && len(o.Outputs) == 0 && o.CheckpointDir == "" && !o.workdirViaS3() {
		for _, flag := range []string{"s3-secret", "stager-image"} {
			switch {
			case flag == "s3-secret" && cmd.Flags().Changed(flag):
				return nil, fmt.Errorf("--s3-secret only applies with --input, --output-path, --checkpoint-dir or --workdir")
			case cmd.Flags().Changed(flag) && o.Workdir == "" && o.HangTimeout == 0 && o.NodesMax == 0 && !jobspec.IsMPI(o.Launcher):
				return nil, fmt.Errorf("--%s only applies with --input, --output-path, --checkpoint-dir, --hang-timeout, --nodes MIN:MAX, --launcher mpi or mpi-ssh, or --workdir", flag)
			}
		}
		if o.HangTimeout == 0 && o.NodesMax == 0 && !jobspec.IsMPI(o.Launcher) {
			return nil, nil
		}
		// The watchdog, an elastic job's rendezvous host and an MPI job's agent are the
		// supervisor's: it runs the command, with nothing to move through S3.
		image, err := o.stagerImage(cmd)
		if err != nil {
			return nil, err
		}
		return &jobspec.Staging{StagerImage: image, NoS3: true, NoLogArchive: true}, nil
	}
	st := &jobspec.Staging{StagerImage: o.StagerImage, ExistingSecret: o.S3Secret, NoLogArchive: o.NoLogArchive}
	if o.CheckpointDir != "" {
		st.Checkpoints = &jobspec.Checkpoints{Dir: s3layout.CleanOutputPath(o.CheckpointDir), Keep: o.CheckpointKeep}
		// On a --volume with nothing else to stage, the wrapper alone is needed: no S3.
		st.NoS3 = jobspec.OnVolume(st.Checkpoints.Dir, o.spec.Volumes) && len(o.Inputs) == 0 && len(o.Outputs) == 0 && !o.workdirViaS3()
		if cmd.Flags().Changed("checkpoint-pattern") {
			// Given, even empty: the spec's validation refuses an empty list.
			st.Checkpoints.Patterns = append([]string{}, o.CheckpointPatterns...)
			if broad := s3layout.BroadPatterns(o.CheckpointPatterns); len(broad) > 0 {
				fmt.Fprintf(o.ErrOut, "Warning: --checkpoint-pattern %s also takes %s for checkpoints: each such file counts as a checkpoint of its own, "+
					"and retention keeps only the newest --checkpoint-keep of them\n", strings.Join(o.CheckpointPatterns, " "), strings.Join(broad, ", "))
			}
		}
	}
	for _, out := range o.Outputs {
		// "/results/" (the SDK's spelling) is the directory "/results": its keys and the
		// outputs annotation must not differ from those of "/results".
		st.Outputs = append(st.Outputs, s3layout.CleanOutputPath(out))
	}
	for _, raw := range o.Inputs {
		in, err := s3layout.ParseInput(raw)
		if err != nil {
			return nil, err
		}
		st.Inputs = append(st.Inputs, in)
	}
	image, err := o.stagerImage(cmd)
	if err != nil {
		return nil, err
	}
	st.StagerImage = image
	if st.NoS3 {
		if cmd.Flags().Changed("s3-secret") {
			return nil, fmt.Errorf("--s3-secret: --checkpoint-dir %s is on a --volume and nothing else goes through S3", st.Checkpoints.Dir)
		}
		return st, nil
	}
	if o.S3Secret == "" {
		// Copied into the Secret NAME-s3; never printed, never on a command line.
		st.Credentials = credentials.FromEnv(o.getenv, s3layout.CredentialKeys...)
	}
	return st, nil
}

// stagerImage is --stager-image or this release's published one. A development build has none:
// a client dry run, which creates nothing, shows a placeholder then (the published repository
// tagged with this build's version, which was never pushed) and says so on stderr, so that it
// still works without the flag; anything that creates the job needs the flag.
func (o *Options) stagerImage(cmd *cobra.Command) (string, error) {
	if cmd.Flags().Changed("stager-image") {
		return o.StagerImage, nil
	}
	if image, ok := s3layout.DefaultStagerImage(o.version); ok {
		return image, nil
	}
	if o.dryRun == cmdutil.DryRunClient {
		placeholder := s3layout.PublishedImage + ":" + o.version
		fmt.Fprintf(o.ErrOut, "Warning: this kubectl-tao is a development build (%s) with no published stager image; "+
			"the dry run shows the placeholder %s, which does not exist: a real submit needs --stager-image\n", o.version, placeholder)
		return placeholder, nil
	}
	return "", fmt.Errorf("this kubectl-tao is a development build (%s) with no published stager image, which --input, --output-path, --checkpoint-dir, --hang-timeout and --workdir need: "+
		"build one with `make stager-image`, push it, and pass --stager-image (a --dry-run=client needs none)", o.version)
}

// Validate checks the spec without contacting the server; a usage error names the defaults
// file, as in Complete.
func (o *Options) Validate() error {
	return o.defaults.explain(o.validate())
}

func (o *Options) validate() error {
	if err := o.validateResumeFrom(); err != nil {
		return err
	}
	if o.Follow && (o.Wait || o.dryRun != cmdutil.DryRunNone) {
		return exitcode.Usagef("--follow cannot be combined with --wait (it already waits) or --dry-run (nothing would run)")
	}
	if o.Wait && o.dryRun != cmdutil.DryRunNone {
		return exitcode.Usagef("--wait cannot be combined with --dry-run: nothing would run")
	}
	if err := jobwait.ValidateStuckTimeout(o.StuckTimeout); err != nil {
		return err
	}
	return exitcode.WithCode(exitcode.Usage, o.spec.Validate())
}

// Run checks capacity and creates the objects, or only prints them for a client dry run.
func (o *Options) Run(ctx context.Context) error {
	if o.dryRun == cmdutil.DryRunClient {
		o.reportWorkdir(o.ErrOut)
		if o.spec.Elastic() {
			fmt.Fprintf(o.ErrOut, "elastic job %s is shown at %d ranks, the most of %s: when it is created it starts with as many as fit\n",
				o.spec.Name, o.spec.Nodes, jobspec.FormatNodesRange(o.spec.NodesMin, o.spec.NodesMax))
		}
		return o.print(jobspec.Build(o.spec))
	}
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return err
	}
	if err := o.resolveResumeFrom(ctx, client); err != nil {
		return err
	}
	if err := o.sizeElastic(ctx, client); err != nil {
		return err
	}
	if o.spec.MPI() {
		if err := jobcreate.CheckMPIServer(ctx, client); err != nil {
			return err
		}
	}
	objs := jobspec.Build(o.spec)
	o.reportWorkdir(o.ErrOut)
	if st := o.spec.Staging; st != nil && st.ExistingSecret != "" {
		warning, err := jobcreate.CheckS3Secret(ctx, client, o.spec.Namespace, st.ExistingSecret)
		if err != nil {
			return err
		}
		o.warn(warning)
	}
	if !o.NoCapacityCheck && o.spec.GPUs > 0 && !o.spec.Elastic() {
		warning, err := jobcreate.CheckCapacity(ctx, client, o.spec)
		if err != nil {
			return err
		}
		o.warn(warning)
	}
	if o.spec.Queue != "" {
		dyn, err := o.factory.DynamicClient()
		if err != nil {
			return err
		}
		if err := kueue.Check(ctx, client.Discovery(), dyn, o.spec.Namespace, o.spec.Queue, o.spec.GPUName(), o.spec.TotalGPUs(), o.spec.PriorityClass, o.ErrOut); err != nil {
			return err
		}
	} else if o.spec.Nodes > 1 {
		kueue.WarnUnqueued(ctx, client.Discovery(), o.spec.Nodes, o.ErrOut)
	}
	upload, err := o.workdirUpload(ctx, client)
	if err != nil {
		return err
	}
	created, err := jobcreate.Create(ctx, client, objs, o.dryRun == cmdutil.DryRunServer, upload)
	if err != nil {
		// An API error could quote what was sent: never the credentials.
		return redact.Error(err, o.secretValues()...)
	}
	// created.Job is what the server stored (the create response, then resumed by a patch that
	// touches only spec.suspend): a field it dropped on create is missing here too.
	warnDroppedRetryFields(o.ErrOut, objs.Job, created.Job)
	if o.spec.Queue != "" && o.dryRun == cmdutil.DryRunNone {
		fmt.Fprintf(o.ErrOut, "job %s is queued in LocalQueue %s: Kueue starts %s when it admits the job (`kubectl tao status %s -n %s` shows it)\n",
			created.Job.Name, o.spec.Queue, jobstatus.Gang(o.spec.Nodes), created.Job.Name, created.Job.Namespace)
	}
	if o.Follow {
		logStreams := o.IOStreams
		// When following, stdout carries only log lines: the created objects are named on stderr.
		o.Out = o.ErrOut
		if err := o.print(created); err != nil {
			return err
		}
		return o.follow(ctx, client, created.Job.Namespace, created.Job.Name, logStreams)
	}
	if err := o.print(created); err != nil || !o.Wait {
		return err
	}
	streams := o.IOStreams
	if *o.PrintFlags.OutputFormat != "" {
		// stdout already holds the requested -o output; a status line would corrupt it.
		streams.Out = io.Discard
	}
	target := jobwait.Target{Namespace: created.Job.Namespace, Name: created.Job.Name, UID: created.Job.UID}
	wait := jobwait.Options{StuckTimeout: o.StuckTimeout, Workload: o.workloadReader(client)}
	return cmdutil.WaitAndReport(ctx, client, target, wait, cmdutil.WaitReport{Clock: o.clock, Streams: streams})
}

// sizeElastic refuses an elastic job the server cannot run and chooses the size it starts at
// (the capacity guard's, or the most of its range without one), saying it on stderr.
func (o *Options) sizeElastic(ctx context.Context, client kubernetes.Interface) error {
	if !o.spec.Elastic() {
		return nil
	}
	if err := jobcreate.CheckElasticServer(ctx, client); err != nil {
		return err
	}
	rng := jobspec.FormatNodesRange(o.spec.NodesMin, o.spec.NodesMax)
	if o.NoCapacityCheck || o.spec.GPUs == 0 {
		o.spec.Nodes = o.spec.NodesMax
		fmt.Fprintf(o.ErrOut, "elastic job %s: starting with %d ranks, the most of %s (no capacity check)\n", o.spec.Name, o.spec.Nodes, rng)
		return nil
	}
	n, why, err := jobcreate.ElasticStart(ctx, client, o.spec)
	if err != nil {
		return err
	}
	o.spec.Nodes = n
	fmt.Fprintf(o.ErrOut, "elastic job %s: %s\n", o.spec.Name, why)
	return nil
}

// warn shows a guard's warning on stderr; "" shows nothing.
func (o *Options) warn(warning string) {
	if warning != "" {
		fmt.Fprintf(o.ErrOut, "Warning: %s\n", warning)
	}
}

// workloadReader reads the Kueue Workload of a queued job for --wait; nil for a job without
// --queue, or without a dynamic client (the wait then sees the job as Queued until it runs).
func (o *Options) workloadReader(client kubernetes.Interface) jobwait.WorkloadReader {
	if o.spec.Queue == "" {
		return nil
	}
	dyn, err := o.factory.DynamicClient()
	if err != nil {
		return nil
	}
	return kueue.WorkloadReader(client.Discovery(), dyn)
}

// secretValues are the credentials submit holds, to be scrubbed from any error.
func (o *Options) secretValues() []string {
	var out []string
	if len(o.spec.MPIKey) > 0 {
		out = append(out, string(o.spec.MPIKey))
	}
	if k := o.spec.SSHKeys; k != nil {
		out = append(out, string(k.ClientPrivate), string(k.HostPrivate))
	}
	for _, kv := range o.spec.SecretEnv {
		out = append(out, kv.Value)
	}
	if o.spec.Staging == nil {
		return out
	}
	for _, v := range o.spec.Staging.Credentials {
		out = append(out, v)
	}
	return out
}

func (o *Options) print(objs jobspec.Objects) error {
	all := objs.All()
	for i, obj := range all {
		// Whatever the format and whether created or not, a Secret is shown redacted.
		if s, ok := obj.(*corev1.Secret); ok {
			all[i] = redact.Secret(s)
		}
	}
	// The name printer (the default "job.batch/NAME created" and -o name) prints one line per
	// object; every other format prints one v1 List holding them all, as kubectl does.
	if format := *o.PrintFlags.OutputFormat; format != "" && format != "name" {
		list, err := toList(all)
		if err != nil {
			return err
		}
		return o.printer.PrintObj(list, o.Out)
	}
	for _, obj := range all {
		if err := o.printer.PrintObj(obj, o.Out); err != nil {
			return err
		}
	}
	return nil
}

// newMPIKey makes an MPI job's agent key: random, so that only the job's own pods hold it, and
// in hex, as the pods read it into an environment variable, which cannot hold every byte.
func newMPIKey() ([]byte, error) {
	raw := make([]byte, jobspec.MinMPIKeyBytes)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("making the MPI job's agent key: %w", err)
	}
	return []byte(hex.EncodeToString(raw)), nil
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

// toList wraps objects in a v1 List, the shape kubectl prints for several objects.
func toList(objs []runtime.Object) (*corev1.List, error) {
	list := &corev1.List{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}}
	for _, obj := range objs {
		raw, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		list.Items = append(list.Items, runtime.RawExtension{Raw: raw, Object: obj})
	}
	return list, nil
}
