// Package jobspec turns the options of `kubectl tao submit` into Kubernetes objects. Everything
// here is pure: no client, clock, randomness or environment, so every rule is a table test and
// every manifest a golden file.
package jobspec

import (
	"fmt"
	"path"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Well-known names shared with the rest of the plugin and with users' scripts.
const (
	// ManagedByLabel marks every object kubectl-tao creates; list and prune select on it.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "kubectl-tao"
	// SubmittingAnnotation marks a Job that submit has created but not finished: it is set when
	// the suspended Job is created and removed by the very patch that starts it (or hands it to
	// Kueue). A Job that still carries it was left by a submit killed between its steps, or whose
	// rollback failed; a Job a user suspended by hand never carries it.
	SubmittingAnnotation = "kubectl-tao.dev/submitting"
	// StatusFileAnnotation is the job's --status-file: the training's progress file that top
	// reads in rank 0 ("" when turned off). Without it top looks in the first --output-path.
	StatusFileAnnotation = "kubectl-tao.dev/status-file"
	// ContainerName is the training container's name in every pod.
	ContainerName = "tao"
	// GPUResource is the extended resource NVIDIA's device plugin advertises for whole GPUs:
	// the one definition of it in the plugin, and the GPU resource of every job that names no
	// other (--gpu-resource, see GPUResourceOf).
	GPUResource corev1.ResourceName = "nvidia.com/gpu"
	// GPUResourceAnnotation is the job's --gpu-resource when it is not GPUResource: the
	// resource its --gpus counts (a MIG profile, shared GPUs). A Job without it counts
	// GPUResource, as every Job did before the flag existed.
	GPUResourceAnnotation = "kubectl-tao.dev/gpu-resource"
	// JobNameLabel is the pod label the Job controller sets; the rendezvous Service selects on it.
	JobNameLabel = "job-name"
	// DefaultMasterPort is torchrun's default rendezvous port.
	DefaultMasterPort = 29500
	// DefaultMultiNodeShmSize is /dev/shm for multi-node jobs unless --shm-size says otherwise:
	// NCCL and DataLoader workers need far more than a container runtime's 64Mi, and 16Gi is
	// what NVIDIA's TAO templates use.
	DefaultMultiNodeShmSize = "16Gi"
	// ShmVolume names the memory-backed emptyDir mounted at /dev/shm.
	ShmVolume = "dshm"
	// FilesVolume names the ConfigMap volume that carries --file contents.
	FilesVolume = "tao-files"
	// QueueLabel names the Kueue LocalQueue a Job is submitted to (--queue). Kueue manages
	// only Jobs that carry it, and admits a Job by setting spec.suspend to false.
	QueueLabel = "kueue.x-k8s.io/queue-name"
	// WorkloadPriorityClassLabel names the Kueue WorkloadPriorityClass of a queued Job
	// (--priority-class with --queue): Kueue orders and preempts workloads by it.
	WorkloadPriorityClassLabel = "kueue.x-k8s.io/priority-class"
	// ResultsPath is where the SDK writes results when a volume is mounted there.
	ResultsPath = "/results"
	// EnvResultsRoot tells TAO entrypoints to write to ResultsPath instead of uploading.
	EnvResultsRoot = "TAO_RESULTS_ROOT"
	// EnvPythonUnbuffered is set to 1 in the training container unless the user sets it (see
	// pythonEnv): Python then writes every line to the pipe the kubelet reads as it prints it.
	EnvPythonUnbuffered = "PYTHONUNBUFFERED"
	// MaxFilesBytes is the ConfigMap size limit (etcd's 1 MiB object limit).
	MaxFilesBytes = 1 << 20
	// Shell runs the user's command when it is one string, as the SDK does.
	Shell = "/bin/bash"
	// legacyWrapperShell and legacyArgv0 are the staging wrapper of Jobs made before the
	// supervisor (`/bin/bash -c SCRIPT kubectl-tao ARG...`): UserCommand still reads them.
	legacyWrapperShell = "/bin/bash"
	legacyArgv0        = "kubectl-tao"
)

// The rendezvous variables a multi-node job exports before the user's command.
const (
	EnvWorldSize       = "WORLD_SIZE"
	EnvNumGPUPerNode   = "NUM_GPU_PER_NODE"
	EnvNNodes          = "NNODES"
	EnvNProcPerNode    = "NPROC_PER_NODE"
	EnvNodeRank        = "NODE_RANK"
	EnvMasterAddr      = "MASTER_ADDR"
	EnvMasterPort      = "MASTER_PORT"
	EnvCompletionIndex = "JOB_COMPLETION_INDEX"
)

// KeyValue is one KEY=VALUE flag value, kept in the order the user gave it.
type KeyValue struct {
	Key, Value string
}

// Spec is everything `kubectl tao submit` needs to build its objects.
type Spec struct {
	Name      string
	Namespace string
	Image     string
	// Command is what followed "--": one element is a bash command string, several are an argv.
	Command []string
	// GPUs per node (pod), counted in GPUResourceName; 0 sets no GPU limit.
	GPUs int
	// GPUResourceName is --gpu-resource, the GPU resource GPUs counts: "" means GPUResource
	// (see GPUName).
	GPUResourceName corev1.ResourceName
	// Nodes is the number of pods (ranks); more than one makes an Indexed Job and a Service.
	// For an elastic job it is the size it starts at, within NodesMin:NodesMax.
	Nodes int
	// NodesMin and NodesMax are --nodes MIN:MAX; NodesMax 0 is a job of fixed size.
	NodesMin, NodesMax int
	Env                []KeyValue
	EnvFromSecrets     []string
	ImagePullSecrets   []string
	NodeSelector       []KeyValue
	Labels             []KeyValue
	Annotations        []KeyValue
	MasterPort         int
	// TTL, when set, becomes ttlSecondsAfterFinished; nil keeps finished Jobs.
	TTL *time.Duration

	// CPU and Memory are Kubernetes quantities set as both request and limit; "" sets none.
	CPU, Memory string
	// ShmSize sizes a memory-backed /dev/shm; "" means the default (DefaultMultiNodeShmSize for
	// multi-node jobs, none for one node), "0" means none.
	ShmSize string
	// Deadline, when set, becomes activeDeadlineSeconds.
	Deadline *time.Duration
	// PriorityClass is the pods' PriorityClass; with Queue it is the Job's Kueue
	// WorkloadPriorityClass instead (see Build).
	PriorityClass  string
	ServiceAccount string
	// Resources are extended resources (rdma/..., nvidia.com/mig-...) NAME=QUANTITY.
	Resources []KeyValue
	// OneRankPerNode spreads a multi-node job's pods over distinct nodes.
	OneRankPerNode bool
	Tolerations    []corev1.Toleration
	// NoGPUToleration drops the default toleration of the nvidia.com/gpu NoSchedule taint.
	NoGPUToleration bool
	// Volumes are PersistentVolumeClaims to mount.
	Volumes []Volume
	// Files are small local files shipped in a ConfigMap and mounted at their paths.
	Files []File
	// Retries bounds how often failed pods are replaced (see applyRetries); 0 fails the Job on
	// the first failure, as the SDK does.
	Retries int
	// Staging, when set, downloads inputs from S3 before the command and uploads outputs after.
	Staging *Staging
	// TerminationGracePeriod, when set, is the pods' terminationGracePeriodSeconds: the time
	// between SIGTERM and SIGKILL, in which the command and the wrapper save their work.
	TerminationGracePeriod *time.Duration
	// HangTimeout, when set (--hang-timeout), has the supervisor end a rank that has printed
	// nothing, written no checkpoint file and kept no GPU busy for this long, with ExitHang.
	HangTimeout time.Duration
	// StatusFile, when set, is --status-file: where the training writes its progress file (TAO's
	// status.json), recorded in StatusFileAnnotation for top; "" turns the reading off.
	StatusFile *string
	// Workdir, when set, ships a packed local directory (--workdir) to every rank.
	Workdir *Workdir
	// Queue is a Kueue LocalQueue in the namespace; "" submits without a queue. A queued Job is
	// built suspended with QueueLabel: Kueue admits it by resuming it, never kubectl-tao.
	Queue string
	// SecretEnv are the --secret-env variables and their values, read from the submitting
	// shell: they go into the Secret EnvSecretName(job), and the pod reads them by secretKeyRef.
	SecretEnv []KeyValue
	// EnvAllow are --env names that only look like credentials (see credentials.LooksSecret).
	EnvAllow []string
	// Launcher is --launcher; "" is LauncherTorchrun.
	Launcher Launcher
	// SlotsPerNode is --slots-per-node of an MPI job; 0 is one per GPU (see Slots).
	SlotsPerNode int
	// MPIKey is an MPI job's agent key, made by submit: it goes into the Secret
	// MPISecretName(job), and the pods read it by secretKeyRef.
	MPIKey []byte
	// SSHKeys are an mpi-ssh job's key pairs, made by submit: the private keys go into the
	// Secret MPISecretName(job), mounted at SSHDir; the public ones into its ConfigMap.
	SSHKeys *SSHKeys
}

// Volume is one --volume CLAIM:MOUNT_PATH[:ro].
type Volume struct {
	Claim     string
	MountPath string
	ReadOnly  bool
}

// File is one --file LOCAL_PATH:CONTAINER_PATH, already read.
type File struct {
	// Source is the local path, for messages only.
	Source        string
	ContainerPath string
	Data          []byte
}

// MultiNode reports whether the spec needs an Indexed Job and a rendezvous Service.
// An elastic job is one even at one rank: it may grow; so is an MPI job, whose hostfile names
// its pods by the Service.
func (s *Spec) MultiNode() bool { return s.Nodes > 1 || s.Elastic() || s.MPI() }

// GPUName is the GPU resource the job's GPUs count: --gpu-resource, else whole GPUs.
func (s *Spec) GPUName() corev1.ResourceName { return GPUResourceOr(s.GPUResourceName) }

// GPUResourceOr is name, or GPUResource when name is "": the one place where no GPU resource
// named means whole GPUs.
func GPUResourceOr(name corev1.ResourceName) corev1.ResourceName {
	if name == "" {
		return GPUResource
	}
	return name
}

// TotalGPUs is the number of GPUs (of GPUName) the whole job asks for.
func (s *Spec) TotalGPUs() int64 { return int64(s.GPUs) * int64(s.Nodes) }

// ValidateStatusFile checks --status-file: "" (off), or an absolute, clean path in the
// container.
func ValidateStatusFile(p string) error {
	if p == "" {
		return nil
	}
	if !path.IsAbs(p) || path.Clean(p) != p || strings.HasSuffix(p, "/") {
		return fmt.Errorf("--status-file %q: must be an absolute, clean path of a file in the container, such as /results/train/status.json, or \"\" to turn progress off", p)
	}
	return nil
}
