// Package submit implements `kubectl tao submit`: the cobra glue, and the thin layer that
// checks capacity and creates the objects jobspec builds.
package submit

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"

	cmdutil "github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/util/jobflags"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobwait"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/kueue"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/tail"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/credentials"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/redact"
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
  kubectl tao submit demo --image busybox --gpus 1 --nodes 2 --dry-run=client -o yaml -- sleep 10

  # Download a dataset prefix and a spec file from S3, upload /results afterwards (credentials
  # from ACCESS_KEY, SECRET_KEY, S3_BUCKET_NAME and S3_ENDPOINT_URL in this shell)
  kubectl tao submit dino --image nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt --gpus 8 \
    --input /data/train=s3://datasets/coco/train/ --input /specs/train.yaml=s3://datasets/specs/dino.yaml \
    --output-path /results -- 'dino train -e /specs/train.yaml results_dir=/results'

  # Ship the code in ./src: every rank runs in /workspace, a snapshot of it
  kubectl tao submit exp-1 --image python:3.13 --gpus 1 --nodes 2 --workdir ./src -- 'python3 train.py'

  # The same with credentials from an existing Secret (keys ACCESS_KEY, SECRET_KEY, S3_BUCKET_NAME)
  kubectl tao submit dino --image IMAGE --s3-secret team-s3 --input /data=s3://datasets/coco/ --output-path /results -- 'train.sh'

  # An NGC key and a Hugging Face token for the command, from this shell, never on the command line
  kubectl tao submit ft --image IMAGE --secret-env NGC_KEY --secret-env HF_TOKEN=MY_HF_TOKEN -- 'train.sh'`

const long = `Submit a GPU training job as a Kubernetes Job.

Everything after "--" is the command. A single argument is a bash command string, run as
/bin/bash -c COMMAND (as the TAO SDK does); several arguments are an argv, passed on exactly as
typed. Either way the command is exec'd (with --output-path: run as a child, the signals
forwarded to it), so it receives SIGTERM when the job is canceled. Text reaches the container
literally: kubectl-tao escapes the kubelet's $(VAR) expansion in the command and in --env
values.

The Job has restartPolicy Never and backoffLimit 0: a failure surfaces instead of being retried.
With --nodes N > 1 it is an Indexed Job of N pods plus a headless Service named after the job,
and every rank gets WORLD_SIZE and NNODES (N), NUM_GPU_PER_NODE and NPROC_PER_NODE (--gpus),
NODE_RANK (its index, 0..N-1), MASTER_ADDR (NAME-0.NAME) and MASTER_PORT (--master-port).

--retries N replaces failed pods instead, through a pod failure policy: evicted, preempted and
lost pods are replaced without counting, OOM kills (exit 137), commands that cannot run
(exit 2, 126, 127) and staging failures (exit 201-203) fail the job at once, and any other
failure is retried up to N times (per
rank with --nodes). A multi-node torchrun gang survives a lost rank only by restarting as a
whole, from the start of its command: have it resume from its last checkpoint (README,
"Retries").

Before creating anything, submit checks that the cluster's allocatable GPUs can ever hold the
job: N ranks of --gpus GPUs each, a rank never spanning nodes. The objects are created
atomically: if any step fails, what was created is removed again.

Pods that ask for GPUs tolerate the nvidia.com/gpu:NoSchedule taint that GPU node pools carry
(--no-gpu-toleration drops it). Multi-node jobs get a 16Gi memory-backed /dev/shm unless
--shm-size says otherwise; it counts toward the pod's memory.

S3 data staging: each --input CONTAINER_PATH=s3://BUCKET/KEY is downloaded before the command
runs (a KEY ending in "/" is a prefix, downloaded as a directory); each --output-path
CONTAINER_PATH is uploaded after it ends, even when it failed, to
s3://$S3_BUCKET_NAME/results/NAME/JOB_UID/CONTAINER_PATH (without its leading "/"). In a
multi-node job every rank downloads and rank 0 alone uploads. The credentials are ACCESS_KEY,
SECRET_KEY, S3_BUCKET_NAME and, for a non-AWS endpoint, S3_ENDPOINT_URL from this shell, copied
into a Secret NAME-s3 owned by the Job; or an existing Secret with those keys named by
--s3-secret (nothing is copied then). Pods read them only through secretKeyRef, and dry runs
print the Secret redacted. submit itself never contacts S3: in the pod, kubectl-tao makes the
transfers, copied there by an init container from --stager-image (default: this release's
published image, ghcr.io/kubectl-tao/kubectl-tao:VERSION; a development build has none and
needs the flag, see make stager-image, except for --dry-run=client, which shows that name with
the build's version as a placeholder and says so on stderr). With --output-path every rank's
combined stdout and stderr is also kept in S3, at
results/NAME/JOB_UID/.kubectl-tao/logs/rank-N.POD.log (one object per attempt: with --retries
each attempt is a new pod), refreshed every minute while the command runs and once after it ends
(--no-log-archive: not kept). The job exits
with the command's code; if the command succeeded but the upload failed, with 202 (stage in
failed: 201), which --retries never retries, so that the job fails. On SIGTERM the upload waits
until the command has exited; an OOM kill or SIGKILL (the end of the termination grace period)
takes the whole container, and nothing more is uploaded then. Every job's container
gets TAO_JOB_ID (the job's name) and TAO_JOB_UID (its UID).

Credentials: --secret-env VAR gives the command the variable VAR with the value of $VAR in this
shell (VAR=LOCAL_VAR: of $LOCAL_VAR), never taken from the command line; the values go
into a Secret NAME-env owned by the Job, which the pods read through secretKeyRef, and dry runs
print it redacted. An unset or empty variable is an error, and nothing is created. --env refuses
names that hold credentials (NGC_KEY, HF_TOKEN, WANDB_API_KEY, ...) or look like them (*_TOKEN,
*_SECRET, *_SECRET_KEY, *_PASSWORD, *_API_KEY): its values are on the command line and in the
Job for anyone who may read it. --env-allow VAR lets a name that only looks secret through.

With --queue NAME the job goes through a Kueue LocalQueue: it is created suspended, and labelled
for the queue only once its Service and ConfigMap exist; Kueue admits it by resuming it, so all
ranks start together. Submit first checks that Kueue is installed and that the LocalQueue exists
in the namespace (a job nobody admits would stay suspended forever).

Without NAME, a name "tao-" plus 5 random characters is chosen.

--workdir DIR ships a local directory with the job: packed into one reproducible archive
(sorted, times and owners zeroed, less .git/ and whatever .gitignore and .taoignore files
exclude; a symlink leaving DIR is refused), unpacked on every rank at --workdir-mount
(/workspace) by an init container before the command runs there. The archive's SHA-256 is in
the pod's TAO_WORKDIR_SHA256 and in status -o json. Without S3 it travels in a ConfigMap
NAME-workdir owned by the Job (1 MiB compressed at most; readable by anyone who may get
ConfigMaps in the namespace); with S3 staging, --s3-secret, or the S3 variables in this shell,
submit uploads it to s3://$S3_BUCKET_NAME/results/NAME/JOB_UID/.kubectl-tao/workdir.tar.zst
while the Job is still suspended (the one upload submit makes itself). --dry-run=client shows
its size, file count and checksum and sends nothing.

Defaults for any of these flags (but --dry-run, -o, --wait, --follow, --file and --workdir) can be kept in
$XDG_CONFIG_HOME/kubectl-tao/config.yaml (~/.config/kubectl-tao/config.yaml, or the file
$TAO_CONFIG names), under "submit:" with the flags' names as keys. A flag on the command line
wins; for a repeatable flag, the command line's values replace the file's list. --dry-run=client
-o yaml shows the result. A broken file is a usage error (exit 2) naming the file and line.`

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
	fl.BoolVar(&o.Wait, "wait", o.Wait, "After creating the job, wait until it ends, as `kubectl tao wait` does (progress on stderr, exit code of the outcome).")
	fl.BoolVar(&o.Follow, "follow", o.Follow, "After creating the job, follow every rank's log as `kubectl tao logs -f` does (exit code of the outcome); Ctrl-C detaches, the job keeps running.")
	jobwait.AddStuckTimeoutFlag(fl, &o.StuckTimeout)
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

// completeStaging turns --input, --output-path, --s3-secret and --stager-image into the spec's
// staging, with the credentials from the shell unless --s3-secret names a Secret. nil without
// --input and --output-path.
func (o *Options) completeStaging(cmd *cobra.Command) (*jobspec.Staging, error) {
	if len(o.Inputs) == 0 && len(o.Outputs) == 0 && !o.workdirViaS3() {
		for _, flag := range []string{"s3-secret", "stager-image"} {
			if cmd.Flags().Changed(flag) && (flag == "s3-secret" || o.Workdir == "") {
				return nil, fmt.Errorf("--%s only applies with --input, --output-path or --workdir", flag)
			}
		}
		return nil, nil
	}
	st := &jobspec.Staging{StagerImage: o.StagerImage, ExistingSecret: o.S3Secret, NoLogArchive: o.NoLogArchive}
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
	return "", fmt.Errorf("this kubectl-tao is a development build (%s) with no published stager image, which --input, --output-path and --workdir need: "+
		"build one with `make stager-image`, push it, and pass --stager-image (a --dry-run=client needs none)", o.version)
}

// Validate checks the spec without contacting the server; a usage error names the defaults
// file, as in Complete.
func (o *Options) Validate() error {
	return o.defaults.explain(o.validate())
}

func (o *Options) validate() error {
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
	objs := jobspec.Build(o.spec)
	o.reportWorkdir(o.ErrOut)
	if o.dryRun == cmdutil.DryRunClient {
		return o.print(objs)
	}
	client, err := o.factory.KubernetesClient()
	if err != nil {
		return err
	}
	if st := o.spec.Staging; st != nil && st.ExistingSecret != "" {
		if err := checkS3Secret(ctx, client, o.spec.Namespace, st.ExistingSecret, o.ErrOut); err != nil {
			return err
		}
	}
	if !o.NoCapacityCheck && o.spec.GPUs > 0 {
		if err := checkCapacity(ctx, client, o.spec, o.ErrOut); err != nil {
			return err
		}
	}
	if o.spec.Queue != "" {
		dyn, err := o.factory.DynamicClient()
		if err != nil {
			return err
		}
		if err := kueue.Check(ctx, client.Discovery(), dyn, o.spec.Namespace, o.spec.Queue, o.spec.TotalGPUs(), o.spec.PriorityClass, o.ErrOut); err != nil {
			return err
		}
	} else if o.spec.Nodes > 1 {
		kueue.WarnUnqueued(ctx, client.Discovery(), o.spec.Nodes, o.ErrOut)
	}
	upload, err := o.workdirUpload(ctx, client)
	if err != nil {
		return err
	}
	created, err := create(ctx, client, objs, o.dryRun == cmdutil.DryRunServer, upload)
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
		return tail.FollowSubmitted(ctx, client, created.Job.Namespace, created.Job.Name, o.StuckTimeout, logStreams)
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
	return jobwait.Wait(ctx, client, target, wait, jobwait.Report{Clock: o.clock, Streams: streams})
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
