// Package jobflags declares, once, the flags that describe a job. submit takes them all (Job);
// preflight takes the ones that decide whether and where the job fits (Shape), so that the two
// read the same flags and the same defaults-file keys the same way; `config view` and preflight
// check a defaults file against every one of them (FlagSet) without building submit's command.
//
// The flags go onto a pflag.FlagSet: no cobra here.
package jobflags

import (
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// Shape are the flags that decide whether the job fits the cluster and where it may run: what
// each rank requests, how many ranks, on which nodes, with which tolerations, pulling with
// which secrets, through which queue.
type Shape struct {
	GPUs             int
	Nodes            int
	CPU              string
	Memory           string
	ShmSize          string
	Resources        []string
	NodeSelector     []string
	Tolerations      []string
	NoGPUToleration  bool
	ImagePullSecrets []string
	Queue            string
}

// NewShape returns the shape flags' defaults: one node of one GPU.
func NewShape() Shape { return Shape{GPUs: 1, Nodes: 1} }

// AddFlags declares the shape flags on fl.
func (s *Shape) AddFlags(fl *pflag.FlagSet) {
	fl.IntVar(&s.GPUs, "gpus", s.GPUs, "GPUs per node (nvidia.com/gpu limit of each pod). 0 sets no GPU limit and skips the capacity check.")
	fl.IntVar(&s.Nodes, "nodes", s.Nodes, "Number of nodes (pods, ranks). More than 1 makes an Indexed Job with a headless Service for the rendezvous.")
	fl.StringVar(&s.CPU, "cpu", s.CPU, "CPU request and limit of each pod, a Kubernetes quantity (e.g. 32, 500m).")
	fl.StringVar(&s.Memory, "memory", s.Memory, "Memory request and limit of each pod (e.g. 256Gi). A memory-backed /dev/shm counts toward it.")
	fl.StringVar(&s.ShmSize, "shm-size", s.ShmSize, "Size of a memory-backed /dev/shm (e.g. 16Gi); it counts toward --memory and toward node memory in the capacity check. Default: "+jobspec.DefaultMultiNodeShmSize+" for multi-node jobs, none for one node; 0 for none.")
	fl.StringArrayVar(&s.Resources, "resource", s.Resources, "Extended resource NAME=QUANTITY per pod, e.g. rdma/ib=1 or nvidia.com/mig-1g.10gb=1 (repeatable).")
	fl.StringArrayVar(&s.NodeSelector, "node-selector", s.NodeSelector, "Node label KEY=VALUE the pods must run on (repeatable).")
	fl.StringArrayVar(&s.Tolerations, "toleration", s.Tolerations, "Toleration KEY[=VALUE]:EFFECT, e.g. dedicated=ml:NoSchedule (repeatable). Pods asking for GPUs tolerate nvidia.com/gpu:NoSchedule by default.")
	fl.BoolVar(&s.NoGPUToleration, "no-gpu-toleration", s.NoGPUToleration, "Do not add the default toleration of the nvidia.com/gpu:NoSchedule taint.")
	fl.StringArrayVar(&s.ImagePullSecrets, "image-pull-secret", s.ImagePullSecrets, "Name of a pre-created image pull Secret, e.g. for nvcr.io (repeatable).")
	fl.StringVar(&s.Queue, "queue", s.Queue, "Kueue LocalQueue to submit to (label kueue.x-k8s.io/queue-name). The Job stays suspended until Kueue admits it, then every rank starts at once.")
}

// Complete sets the shape's fields of spec, parsing the repeatable flags. Its errors name the
// flag; callers report them as usage errors.
func (s *Shape) Complete(spec *jobspec.Spec) error {
	spec.GPUs, spec.Nodes = s.GPUs, s.Nodes
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
}

// NewJob returns the job flags' defaults.
func NewJob() Job {
	return Job{Shape: NewShape(), MasterPort: jobspec.DefaultMasterPort, WorkdirMount: jobspec.DefaultWorkdirMount, WorkdirMaxSize: DefaultWorkdirMaxSize}
}

// DefaultWorkdirMaxSize is --workdir-max-size's default, 256 MiB.
const DefaultWorkdirMaxSize = "256Mi"

// AddFlags declares every job flag on fl.
func (j *Job) AddFlags(fl *pflag.FlagSet) {
	j.Shape.AddFlags(fl)
	fl.StringVar(&j.Image, "image", j.Image, "Container image to run (required).")
	fl.StringArrayVar(&j.Env, "env", j.Env, "Environment variable KEY=VALUE for the command (repeatable). The value arrives literally.")
	fl.StringArrayVar(&j.SecretEnv, "secret-env", j.SecretEnv, "Credential NAME for the command, its value read from this shell's $NAME, or NAME=LOCAL_NAME to read $LOCAL_NAME (repeatable); never on the command line. Carried in a Secret JOB-env owned by the Job, read by secretKeyRef, shown REDACTED.")
	fl.StringArrayVar(&j.EnvAllow, "env-allow", j.EnvAllow, "Let --env set NAME although the name looks like a credential (*_TOKEN, *_PASSWORD, ...) when it holds none (repeatable). Known credentials such as NGC_KEY need --secret-env.")
	fl.StringArrayVar(&j.EnvFromSecrets, "env-from-secret", j.EnvFromSecrets, "Name of a Secret whose keys become environment variables (repeatable).")
	fl.StringArrayVar(&j.Labels, "label", j.Labels, "Label KEY=VALUE for the Job and its pods (repeatable).")
	fl.StringArrayVar(&j.Annotations, "annotation", j.Annotations, "Annotation KEY=VALUE for the Job and its pods (repeatable).")
	fl.IntVar(&j.MasterPort, "master-port", j.MasterPort, "Rendezvous port of rank 0 (MASTER_PORT) for multi-node jobs.")
	fl.DurationVar(&j.TTL, "ttl", 0, "Delete the Job this long after it finishes (ttlSecondsAfterFinished), e.g. 1h. Unset: finished Jobs are kept.")
	fl.DurationVar(&j.Deadline, "deadline", 0, "Fail the Job if it runs longer than this (activeDeadlineSeconds), e.g. 72h.")
	fl.StringVar(&j.PriorityClass, "priority-class", j.PriorityClass, "PriorityClass of the pods; with --queue, the Kueue WorkloadPriorityClass of the job instead (label kueue.x-k8s.io/priority-class; the pods get none), by which Kueue orders and preempts queued jobs.")
	fl.StringVar(&j.ServiceAccount, "service-account", j.ServiceAccount, "ServiceAccount the pods run as.")
	fl.BoolVar(&j.OneRankPerNode, "one-rank-per-node", j.OneRankPerNode, "Spread a multi-node job's pods over distinct nodes (topology spread on the hostname).")
	fl.StringArrayVar(&j.Volumes, "volume", j.Volumes, "PersistentVolumeClaim to mount, CLAIM:MOUNT_PATH[:ro] (repeatable). A volume at /results sets TAO_RESULTS_ROOT=/results.")
	fl.StringArrayVar(&j.Files, "file", j.Files, "Local file to ship with the job, LOCAL_PATH:CONTAINER_PATH (repeatable), e.g. a TAO spec file. Carried in a ConfigMap owned by the Job, 1 MiB in all.")
	fl.IntVar(&j.Retries, "retries", j.Retries, "Replace failed pods up to N times (per rank for multi-node jobs). Evictions, preemption and node loss never count and are always replaced; OOM kills (exit 137), commands that cannot run (exit 2, 126, 127) and staging failures (exit 201-203) fail the job at once. 0: the first failure fails the job. At most "+strconv.Itoa(jobspec.MaxRetries)+".")
	fl.StringArrayVar(&j.Inputs, "input", j.Inputs, "Download from S3 before the command, CONTAINER_PATH=s3://BUCKET/KEY (repeatable); a KEY ending in / is a prefix, downloaded as a directory.")
	fl.StringArrayVar(&j.Outputs, "output-path", j.Outputs, "Upload CONTAINER_PATH (a file or directory) to s3://$S3_BUCKET_NAME/results/NAME/JOB_UID/CONTAINER_PATH after the command, even when it failed (repeatable).")
	fl.StringVar(&j.S3Secret, "s3-secret", j.S3Secret, "Existing Secret with the S3 credentials (keys ACCESS_KEY, SECRET_KEY, S3_BUCKET_NAME, optional S3_ENDPOINT_URL) for --input/--output-path. Default: the variables of the same names in this shell, copied into a Secret NAME-s3 owned by the Job.")
	fl.StringVar(&j.StagerImage, "stager-image", j.StagerImage, "Image holding the static kubectl-tao binary at /kubectl-tao, which makes the transfers of --input/--output-path and unpacks --workdir. Default: "+s3layout.PublishedImage+":VERSION for a release; a development build has no published image and needs this flag (make stager-image).")
	fl.StringVar(&j.Workdir, "workdir", j.Workdir, "Local directory to ship with the job: packed into one archive (less .git/ and what .gitignore and .taoignore files exclude), unpacked on every rank at --workdir-mount before the command, which runs there. In a ConfigMap owned by the Job, or through S3 when the job has S3 staging (--input, --output-path, --s3-secret) or the S3 variables are set in this shell. Needs the stager image (--stager-image).")
	fl.StringVar(&j.WorkdirMount, "workdir-mount", j.WorkdirMount, "Where --workdir's files appear in the container; the command's working directory.")
	fl.StringVar(&j.WorkdirMaxSize, "workdir-max-size", j.WorkdirMaxSize, "Refuse a --workdir whose files add up to more than this (uncompressed), a quantity such as 256Mi or 2Gi; checked before anything is packed or sent.")
	fl.BoolVar(&j.NoLogArchive, "no-log-archive", j.NoLogArchive, "With --output-path, do not keep each rank's combined stdout and stderr in S3 (results/NAME/JOB_UID/.kubectl-tao/logs/rank-N.POD.log, one per attempt, refreshed every minute while the command runs).")
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
