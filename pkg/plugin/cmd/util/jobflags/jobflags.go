// Package jobflags declares, once, the flags that describe a job. submit takes them all (Job);
// preflight takes the ones that decide whether and where the job fits (Shape), so that the two
// read the same flags and the same defaults-file keys the same way; `config view` and preflight
// check a defaults file against every one of them (FlagSet) without building submit's command.
//
// The flags go onto a pflag.FlagSet: no cobra here.
package jobflags

import (
	"slices"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// Shape are the flags that decide whether the job fits the cluster and where it may run: what
// each rank requests, how many ranks, on which nodes, with which tolerations, pulling with
// which secrets, through which queue.
type Shape struct {
	GPUs        int
	GPUResource string
	// Nodes is --nodes N; NodesMin and NodesMax are --nodes MIN:MAX (0 for N).
	Nodes, NodesMin, NodesMax int
	CPU                       string
	Memory                    string
	ShmSize                   string
	Resources                 []string
	NodeSelector              []string
	Tolerations               []string
	NoGPUToleration           bool
	ImagePullSecrets          []string
	Queue                     string
}

// NewShape returns the shape flags' defaults: one node of one GPU.
func NewShape() Shape { return Shape{GPUs: 1, Nodes: 1} }

// AddFlags declares the shape flags on fl.
func (s *Shape) AddFlags(fl *pflag.FlagSet) {
	fl.IntVar(&s.GPUs, "gpus", s.GPUs, "GPUs per node (the limit of each pod in --gpu-resource, whole GPUs unless it says otherwise); 0 sets no GPU limit and skips the capacity check.")
	fl.StringVar(&s.GPUResource, "gpu-resource", s.GPUResource, "The GPU resource --gpus counts: nvidia.com/gpu (whole or time-sliced GPUs), nvidia.com/gpu.shared or a MIG slice such as nvidia.com/mig-1g.10gb; see docs/gpus.md (default nvidia.com/gpu).")
	fl.Var((*nodesValue)(s), "nodes", "Number of nodes (pods, ranks); more than 1 makes an Indexed Job with a headless Service for the rendezvous. MIN:MAX makes an elastic job: it starts with as many ranks as fit, within the range, and kubectl tao scale resizes it (see docs/training.md).")
	fl.StringVar(&s.CPU, "cpu", s.CPU, "CPU request and limit of each pod, a Kubernetes quantity (e.g. 32, 500m).")
	fl.StringVar(&s.Memory, "memory", s.Memory, "Memory request and limit of each pod (e.g. 256Gi), a memory-backed /dev/shm included.")
	fl.StringVar(&s.ShmSize, "shm-size", s.ShmSize, "Size of a memory-backed /dev/shm, counted toward --memory (default: "+jobspec.DefaultMultiNodeShmSize+" for multi-node jobs, none for one node; 0 for none).")
	fl.StringArrayVar(&s.Resources, "resource", s.Resources, "Extended resource NAME=QUANTITY per pod beside the GPUs, e.g. rdma/ib=1 (repeatable).")
	fl.StringArrayVar(&s.NodeSelector, "node-selector", s.NodeSelector, "Node label KEY=VALUE the pods must run on (repeatable).")
	fl.StringArrayVar(&s.Tolerations, "toleration", s.Tolerations, "Toleration KEY[=VALUE]:EFFECT, e.g. dedicated=ml:NoSchedule, beside the nvidia.com/gpu:NoSchedule one that pods asking for GPUs get (repeatable).")
	fl.BoolVar(&s.NoGPUToleration, "no-gpu-toleration", s.NoGPUToleration, "Do not add the default toleration of the nvidia.com/gpu:NoSchedule taint.")
	fl.StringArrayVar(&s.ImagePullSecrets, "image-pull-secret", s.ImagePullSecrets, "Name of a pre-created image pull Secret, e.g. for nvcr.io (repeatable).")
	fl.StringVar(&s.Queue, "queue", s.Queue, "Kueue LocalQueue to submit to, which starts every rank at once when it admits the job.")
}

// nodesValue is --nodes: N, or MIN:MAX for an elastic job (which starts at MAX until submit's
// capacity guard chooses its size).
type nodesValue Shape

func (v *nodesValue) Set(raw string) error {
	n, minN, maxN, err := jobspec.ParseNodes(raw)
	if err != nil {
		return err
	}
	v.Nodes, v.NodesMin, v.NodesMax = n, minN, maxN
	return nil
}

func (v *nodesValue) String() string {
	if v.NodesMax > 0 {
		return jobspec.FormatNodesRange(v.NodesMin, v.NodesMax)
	}
	return strconv.Itoa(v.Nodes)
}

func (v *nodesValue) Type() string { return "N|MIN:MAX" }

// launcherValue is --launcher: an unknown launcher is refused as the flag is read.
type launcherValue jobspec.Launcher

func (v *launcherValue) Set(raw string) error {
	l, err := jobspec.ParseLauncher(raw)
	if err != nil {
		return err
	}
	*v = launcherValue(l)
	return nil
}

func (v *launcherValue) String() string { return string(*v) }

func (v *launcherValue) Type() string { return "torchrun|mpi|mpi-ssh" }

// Complete sets the shape's fields of spec, parsing the repeatable flags. Its errors name the
// flag; callers report them as usage errors.
func (s *Shape) Complete(spec *jobspec.Spec) error {
	spec.GPUs, spec.Nodes = s.GPUs, s.Nodes
	spec.NodesMin, spec.NodesMax = s.NodesMin, s.NodesMax
	spec.GPUResourceName = corev1.ResourceName(s.GPUResource)
	spec.CPU, spec.Memory, spec.ShmSize = s.CPU, s.Memory, s.ShmSize
	spec.NoGPUToleration = s.NoGPUToleration
	spec.ImagePullSecrets = s.ImagePullSecrets
	spec.Queue = s.Queue
	spec.Tolerations = nil
	for _, raw := range s.Tolerations {
		t, err := jobspec.ParseToleration(raw)
		if err != nil {
			return err
		}
		spec.Tolerations = append(spec.Tolerations, t)
	}
	var err error
	if spec.NodeSelector, err = jobspec.ParseKeyValues("node-selector", s.NodeSelector); err != nil {
		return err
	}
	spec.Resources, err = jobspec.ParseKeyValues("resource", s.Resources)
	return err
}

// Job are all of submit's flags that describe the job, the shape included: every flag a
// defaults file may set, and --file. What says how to run submit itself (--dry-run, -o, --wait,
// --follow) is submit's own.
type Job struct {
	Shape
	Image           string
	Env             []string
	EnvFromSecrets  []string
	Labels          []string
	Annotations     []string
	MasterPort      int
	TTL             time.Duration
	NoCapacityCheck bool
	Deadline        time.Duration
	PriorityClass   string
	ServiceAccount  string
	OneRankPerNode  bool
	Volumes         []string
	Files           []string
	Retries         int
	Inputs          []string
	Outputs         []string
	S3Secret        string
	StagerImage     string
	SecretEnv       []string
	EnvAllow        []string
	Workdir         string
	WorkdirMount    string
	WorkdirMaxSize  string
	NoLogArchive    bool
	// CheckpointDir, CheckpointKeep and CheckpointPatterns keep checkpoints in S3.
	CheckpointDir          string
	CheckpointKeep         int
	CheckpointPatterns     []string
	TerminationGracePeriod time.Duration
	HangTimeout            time.Duration
	StatusFile             string
	// Launcher is --launcher; SlotsPerNode --slots-per-node (0: one per GPU).
	Launcher     jobspec.Launcher
	SlotsPerNode int
}

// NewJob returns the job flags' defaults.
func NewJob() Job {
	return Job{Shape: NewShape(), Launcher: jobspec.LauncherTorchrun, MasterPort: jobspec.DefaultMasterPort, WorkdirMount: jobspec.DefaultWorkdirMount, WorkdirMaxSize: DefaultWorkdirMaxSize,
		CheckpointKeep: s3layout.DefaultCheckpointKeep, CheckpointPatterns: slices.Clone(s3layout.DefaultCheckpointPatterns), TerminationGracePeriod: jobspec.DefaultTerminationGracePeriod}
}

// DefaultWorkdirMaxSize is --workdir-max-size's default, 256 MiB.
const DefaultWorkdirMaxSize = "256Mi"

// AddFlags declares every job flag on fl.
func (j *Job) AddFlags(fl *pflag.FlagSet) {
	j.Shape.AddFlags(fl)
	fl.StringVar(&j.Image, "image", j.Image, "Container image to run (required).")
	fl.StringArrayVar(&j.Env, "env", j.Env, "Environment variable KEY=VALUE for the command, passed on literally (repeatable).")
	fl.StringArrayVar(&j.SecretEnv, "secret-env", j.SecretEnv, "Credential NAME for the command, its value read from this shell's $NAME (or $LOCAL_NAME, with NAME=LOCAL_NAME) into a Secret owned by the Job (repeatable).")
	fl.StringArrayVar(&j.EnvAllow, "env-allow", j.EnvAllow, "Let --env set NAME, whose name looks like a credential (*_TOKEN, *_PASSWORD, ...) but which holds none (repeatable).")
	fl.StringArrayVar(&j.EnvFromSecrets, "env-from-secret", j.EnvFromSecrets, "Name of a Secret whose keys become environment variables (repeatable).")
	fl.StringArrayVar(&j.Labels, "label", j.Labels, "Label KEY=VALUE for the Job and its pods (repeatable).")
	fl.StringArrayVar(&j.Annotations, "annotation", j.Annotations, "Annotation KEY=VALUE for the Job and its pods (repeatable).")
	fl.IntVar(&j.MasterPort, "master-port", j.MasterPort, "Rendezvous port of rank 0 (MASTER_PORT) for multi-node jobs.")
	fl.DurationVar(&j.TTL, "ttl", 0, "Delete the Job this long after it finishes (ttlSecondsAfterFinished), e.g. 1h; unset, finished Jobs are kept.")
	fl.DurationVar(&j.Deadline, "deadline", 0, "Fail the Job if it runs longer than this (activeDeadlineSeconds), e.g. 72h.")
	fl.StringVar(&j.PriorityClass, "priority-class", j.PriorityClass, "PriorityClass of the pods, or with --queue the Kueue WorkloadPriorityClass of the job.")
	fl.StringVar(&j.ServiceAccount, "service-account", j.ServiceAccount, "ServiceAccount the pods run as.")
	fl.BoolVar(&j.OneRankPerNode, "one-rank-per-node", j.OneRankPerNode, "Spread a multi-node job's pods over distinct nodes (topology spread on the hostname).")
	fl.StringArrayVar(&j.Volumes, "volume", j.Volumes, "PersistentVolumeClaim to mount, CLAIM:MOUNT_PATH[:ro]; one at /results sets TAO_RESULTS_ROOT=/results (repeatable).")
	fl.StringArrayVar(&j.Files, "file", j.Files, "Local file to ship with the job, LOCAL_PATH:CONTAINER_PATH, such as a TAO spec file (repeatable; 1 MiB in all).")
	fl.IntVar(&j.Retries, "retries", j.Retries, "Replace failed pods up to N times per rank (at most "+strconv.Itoa(jobspec.MaxRetries)+"), evictions never counting, OOM kills and commands that cannot run failing the job at once.")
	fl.StringArrayVar(&j.Inputs, "input", j.Inputs, "Download from S3 before the command, CONTAINER_PATH=s3://BUCKET/KEY (repeatable); a KEY ending in / is a prefix, downloaded as a directory.")
	fl.StringArrayVar(&j.Outputs, "output-path", j.Outputs, "Upload CONTAINER_PATH (a file or directory) to s3://$S3_BUCKET_NAME/results/NAME/JOB_UID/CONTAINER_PATH after the command, even when it failed (repeatable).")
	fl.StringVar(&j.S3Secret, "s3-secret", j.S3Secret, "Existing Secret with the S3 credentials (keys ACCESS_KEY, SECRET_KEY, S3_BUCKET_NAME, optional S3_ENDPOINT_URL), instead of this shell's variables of those names.")
	fl.StringVar(&j.StagerImage, "stager-image", j.StagerImage, "Image with the static kubectl-tao binary at /kubectl-tao, for --input, --output-path and --workdir (default: "+s3layout.PublishedImage+":VERSION; a development build must set it).")
	fl.StringVar(&j.Workdir, "workdir", j.Workdir, "Local directory to ship with the job, less what .gitignore and .taoignore exclude: every rank runs the command in a snapshot of it at --workdir-mount.")
	fl.StringVar(&j.WorkdirMount, "workdir-mount", j.WorkdirMount, "Where --workdir's files appear in the container; the command's working directory.")
	fl.StringVar(&j.WorkdirMaxSize, "workdir-max-size", j.WorkdirMaxSize, "Refuse a --workdir whose files add up to more than this (uncompressed), a quantity such as 256Mi or 2Gi; checked before anything is packed or sent.")
	fl.BoolVar(&j.NoLogArchive, "no-log-archive", j.NoLogArchive, "With --output-path or --checkpoint-dir, do not keep each rank's combined stdout and stderr in S3, where logs and diagnose read it once the pods are gone.")
	fl.StringVar(&j.CheckpointDir, "checkpoint-dir", j.CheckpointDir, "Keep the files every rank writes under this container directory in S3 (next to --output-path's, same credentials) while the command runs, and restore them there at the start of every attempt: a retried, evicted or preempted rank resumes from $TAO_RESUME_CHECKPOINT.")
	fl.IntVar(&j.CheckpointKeep, "checkpoint-keep", j.CheckpointKeep, "With --checkpoint-dir, how many of the newest complete checkpoints stay in S3; other files are kept at their latest version.")
	fl.StringArrayVar(&j.CheckpointPatterns, "checkpoint-pattern", j.CheckpointPatterns, "With --checkpoint-dir, the names of checkpoint files, or of checkpoint directories with a \"/\" at the end ('ckpt_*/': the directory is one checkpoint, complete once renamed into place or unchanged); a shell pattern, repeatable; given, it replaces the default file patterns. HuggingFace, DeepSpeed, Megatron and torch.distributed.checkpoint directories are known whatever the patterns.")
	fl.DurationVar(&j.TerminationGracePeriod, "termination-grace-period", j.TerminationGracePeriod, "Time between SIGTERM and SIGKILL when a pod is stopped (cancel, eviction, preemption), for the command's last checkpoint and its upload, then the log archive and outputs.")
	fl.DurationVar(&j.HangTimeout, "hang-timeout", j.HangTimeout, "End and retry (with --retries) an attempt in which no rank has printed a line, written a checkpoint file or kept a GPU busy for this long, at least "+jobspec.MinHangTimeout.String()+", after dumping every rank's Python stacks into its log; off when unset. Use it with --checkpoint-dir, so that the new attempt resumes.")
	fl.StringVar(&j.StatusFile, "status-file", j.StatusFile, "The progress file the training writes (TAO's status.json: epoch, ETA, KPIs), read by top in rank 0 (default: the newest status.json in the first --output-path or one level below it, else under /results; \"\" turns it off).")
	fl.Var((*launcherValue)(&j.Launcher), "launcher", "How the processes start: torchrun (every pod runs the command, its ranks meet at a rendezvous), mpi (rank 0's pod runs the command, mpirun or deepspeed over $TAO_HOSTFILE, which starts the processes on every pod through the supervisor; nothing needed in the image), or mpi-ssh (the same over the image's own ssh and sshd, with keys made for the job; see docs/training.md).")
	fl.IntVar(&j.SlotsPerNode, "slots-per-node", j.SlotsPerNode, "With --launcher mpi or mpi-ssh, how many processes the hostfile lets mpirun start on each pod (default: --gpus, at least 1).")
	fl.BoolVar(&j.NoCapacityCheck, "no-capacity-check", j.NoCapacityCheck, "Skip the check that the cluster's allocatable GPUs can hold the job.")
}

// FlagSet is every job flag, as submit declares them: what a defaults file is checked against
// by the commands that only read it (config view, preflight).
func FlagSet() *pflag.FlagSet {
	j := NewJob()
	fl := pflag.NewFlagSet("submit", pflag.ContinueOnError)
	j.AddFlags(fl)
	return fl
}
