// Package jobspec turns the options of `kubectl tao submit` into Kubernetes objects. Everything
// here is pure: no client, clock, randomness or environment, so every rule is a table test and
// every manifest a golden file.
package jobspec

import (
	"time"
)

// Well-known names shared with the rest of the plugin and with users' scripts.
const (
	// ManagedByLabel marks every object kubectl-tao creates; list and prune select on it.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "kubectl-tao"
	// ContainerName is the training container's name in every pod.
	ContainerName = "tao"
	// GPUResource is the extended resource NVIDIA's device plugin advertises.
	GPUResource = "nvidia.com/gpu"
	// JobNameLabel is the pod label the Job controller sets; the rendezvous Service selects on it.
	JobNameLabel = "job-name"
	// DefaultMasterPort is torchrun's default rendezvous port.
	DefaultMasterPort = 29500
	// Shell runs the user's command, as the SDK does.
	Shell = "/bin/bash"
	// argv0 names the wrapper script in `bash -c SCRIPT argv0 ARG...`; it shows up in ps.
	argv0 = "kubectl-tao"
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
	// GPUs per node (pod); 0 sets no GPU limit.
	GPUs int
	// Nodes is the number of pods (ranks); more than one makes an Indexed Job and a Service.
	Nodes            int
	Env              []KeyValue
	EnvFromSecrets   []string
	ImagePullSecrets []string
	NodeSelector     []KeyValue
	Labels           []KeyValue
	Annotations      []KeyValue
	MasterPort       int
	// TTL, when set, becomes ttlSecondsAfterFinished; nil keeps finished Jobs.
	TTL *time.Duration
}

// MultiNode reports whether the spec needs an Indexed Job and a rendezvous Service.
func (s *Spec) MultiNode() bool { return s.Nodes > 1 }

// TotalGPUs is the number of GPUs the whole job asks for.
func (s *Spec) TotalGPUs() int64 { return int64(s.GPUs) * int64(s.Nodes) }
