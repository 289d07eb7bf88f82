package jobspec

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// An elastic job (--nodes MIN:MAX) is an Indexed Job whose completions and parallelism, kept
// equal, change while it runs: `kubectl tao scale` sets them, and Kubernetes removes the highest
// indexes when they shrink, so index 0, which hosts torchrun's c10d rendezvous store, stays. Its
// success is index 0's (a success policy): torchrun's agents end together, and a rank whose pod
// was lost and never placed again must not keep the job from completing.
//
// torchrun reads a default for each of its flags from PET_<FLAG>, so the job's env alone makes
// `torchrun train.py` elastic; flags on the command line still win. Which agent hosts the
// store is said per pod (is_host in PET_RDZV_CONF) by the supervisor, which every elastic job
// runs under: torch decides it by matching the endpoint against the pod's hostname otherwise,
// and the headless Service name never matches.
const (
	// NodesRangeAnnotation is an elastic job's MIN:MAX on its Job; scale, status and list read it.
	NodesRangeAnnotation = "kubectl-tao.dev/nodes"
	// EnvRdzvID is the rendezvous id: the Job's UID, one per run, so that a job submitted again
	// under the same name never meets the old one's agents.
	EnvRdzvID = "RDZV_ID"
	// The torchrun defaults an elastic job sets (see the comment above).
	EnvPETNNodes       = "PET_NNODES"
	EnvPETNProcPerNode = "PET_NPROC_PER_NODE"
	EnvPETRdzvBackend  = "PET_RDZV_BACKEND"
	EnvPETRdzvEndpoint = "PET_RDZV_ENDPOINT"
	EnvPETRdzvID       = "PET_RDZV_ID"
	EnvPETRdzvConf     = "PET_RDZV_CONF"
	// EnvPETMaxRestarts bounds how often torchrun's agents start their workers again after a
	// worker failed (a lost peer is one): --retries, and at least defaultMaxRestarts, since
	// every change of membership that breaks a collective costs one.
	EnvPETMaxRestarts = "PET_MAX_RESTARTS"
	// EnvTorchLogLevel is the level of torch.distributed.elastic's loggers (WARNING unless set).
	// An elastic job sets INFO unless the user sets it: the agents then log each rendezvous and
	// its world size ("group_world_size=3"), which is news in an elastic job's log and what
	// `scale --wait` reads.
	EnvTorchLogLevel = "LOGLEVEL"
	// ElasticRdzvBackend is the rendezvous backend of elastic jobs (PET_RDZV_BACKEND).
	ElasticRdzvBackend  = "c10d"
	controllerUIDLabel  = "batch.kubernetes.io/controller-uid"
	defaultMaxRestarts  = DefaultElasticRetries
	elasticMinorVersion = 31
)

// DefaultElasticRetries is --retries of an elastic job that does not give it: a lost rank's pod
// is started again, and the job goes on without it meanwhile.
const DefaultElasticRetries = 3

// ElasticMinMinor is the oldest Kubernetes minor (1.x) that runs elastic jobs: elastic Indexed
// Jobs are GA from 1.31 and Job success policies on by default from 1.31. An older server would
// drop the success policy without a word.
const ElasticMinMinor = elasticMinorVersion

// ParseNodes reads --nodes: N (exactly N ranks) or MIN:MAX (elastic). For N, min and max are 0.
func ParseNodes(v string) (n, minN, maxN int, err error) {
	lo, hi, elastic := strings.Cut(strings.TrimSpace(v), ":")
	if !elastic {
		n, err := strconv.Atoi(lo)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("%q is not a number of nodes nor MIN:MAX", v)
		}
		return n, 0, 0, nil
	}
	a, err1 := strconv.Atoi(lo)
	b, err2 := strconv.Atoi(hi)
	switch {
	case err1 != nil || err2 != nil:
		return 0, 0, 0, fmt.Errorf("%q: MIN and MAX must be whole numbers, as in 2:4", v)
	case a < 1:
		return 0, 0, 0, fmt.Errorf("%q: MIN must be 1 or more", v)
	case a > b:
		return 0, 0, 0, fmt.Errorf("%q: MIN must not be above MAX", v)
	}
	return b, a, b, nil
}

// FormatNodesRange is MIN:MAX as --nodes and NodesRangeAnnotation spell it.
func FormatNodesRange(minN, maxN int) string { return strconv.Itoa(minN) + ":" + strconv.Itoa(maxN) }

// Elastic reports whether the spec is an elastic job (--nodes MIN:MAX).
func (s *Spec) Elastic() bool { return s.NodesMax > 0 }

// NodesRange reads an elastic Job's MIN:MAX; ok is false for a Job of fixed size.
func NodesRange(job *batchv1.Job) (minN, maxN int, ok bool) {
	v, found := job.Annotations[NodesRangeAnnotation]
	if !found {
		return 0, 0, false
	}
	_, minN, maxN, err := ParseNodes(v)
	if err != nil || maxN == 0 {
		return 0, 0, false
	}
	return minN, maxN, true
}

// ValidateScale checks `scale --nodes n` of an elastic job of range minN:maxN.
func ValidateScale(n, minN, maxN int) error {
	if n < minN || n > maxN {
		return fmt.Errorf("invalid --nodes %d: the job is elastic between %s, so it may have from %d to %d ranks", n, FormatNodesRange(minN, maxN), minN, maxN)
	}
	return nil
}

// ElasticSize is how many ranks an elastic job starts with when fit ranks fit the cluster's free
// capacity now: fit, kept within MIN:MAX.
func ElasticSize(minN, maxN int, fit int64) int {
	return int(max(int64(minN), min(int64(maxN), fit)))
}

// validateElastic checks MIN:MAX and what cannot go with it.
func (s *Spec) validateElastic() []error {
	if !s.Elastic() {
		return nil
	}
	var errs []error
	switch {
	case s.NodesMin < 1 || s.NodesMin > s.NodesMax:
		errs = append(errs, fmt.Errorf("invalid --nodes %s: MIN must be 1 or more and not above MAX", FormatNodesRange(s.NodesMin, s.NodesMax)))
	case s.Nodes < s.NodesMin || s.Nodes > s.NodesMax:
		errs = append(errs, fmt.Errorf("internal error: %d ranks outside --nodes %s", s.Nodes, FormatNodesRange(s.NodesMin, s.NodesMax)))
	}
	if s.Queue != "" {
		errs = append(errs, errors.New("--nodes MIN:MAX cannot go with --queue yet: Kueue would admit and resize the job only through its elastic workloads (an alpha feature gate), which kubectl-tao does not drive; give --nodes N with --queue, or leave out --queue"))
	}
	if s.Staging == nil {
		errs = append(errs, errors.New("internal error: an elastic job without the supervisor"))
	}
	if s.Retries == 0 {
		errs = append(errs, errors.New("--nodes MIN:MAX cannot go with --retries 0: a rank whose pod fails or is deleted would fail the whole job instead of leaving the others to go on (leave out --retries for the default of 3)"))
	}
	return errs
}

// applyElastic makes the Job elastic: its range recorded and index 0's success the job's.
func applyElastic(s Spec, job *batchv1.Job) {
	if !s.Elastic() {
		return
	}
	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}
	job.Annotations[NodesRangeAnnotation] = FormatNodesRange(s.NodesMin, s.NodesMax)
	job.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: ptr.To("0")}}}
}

// elasticEnv is the rendezvous env of an elastic job, in place of the fixed-size one: no
// WORLD_SIZE (torchrun sets it for its workers at each size) and NNODES as MIN:MAX.
func elasticEnv(s Spec) []corev1.EnvVar {
	nnodes := FormatNodesRange(s.NodesMin, s.NodesMax)
	host := PodHost(s.Name, 0)
	env := []corev1.EnvVar{
		{Name: EnvNumGPUPerNode, Value: strconv.Itoa(s.GPUs)},
		{Name: EnvNNodes, Value: nnodes},
		{Name: EnvNProcPerNode, Value: strconv.Itoa(s.GPUs)},
		{Name: EnvMasterAddr, Value: host},
		{Name: EnvMasterPort, Value: strconv.Itoa(s.MasterPort)},
		{Name: EnvRdzvID, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
			FieldPath: "metadata.labels['" + controllerUIDLabel + "']",
		}}},
		{Name: EnvPETNNodes, Value: nnodes},
		{Name: EnvPETNProcPerNode, Value: strconv.Itoa(max(s.GPUs, 1))},
		{Name: EnvPETRdzvBackend, Value: ElasticRdzvBackend},
		{Name: EnvPETRdzvEndpoint, Value: host + ":" + strconv.Itoa(s.MasterPort)},
		{Name: EnvPETRdzvID, Value: "$(" + EnvRdzvID + ")"},
		{Name: EnvPETMaxRestarts, Value: strconv.Itoa(max(s.Retries, defaultMaxRestarts))},
	}
	for _, kvs := range [][]KeyValue{s.Env, s.SecretEnv} {
		for _, kv := range kvs {
			if kv.Key == EnvTorchLogLevel {
				return env
			}
		}
	}
	return append(env, corev1.EnvVar{Name: EnvTorchLogLevel, Value: "INFO"})
}

// RdzvHostConf is what the supervisor puts in PET_RDZV_CONF for the rank of a pod's completion
// index, unless the user set it: index 0 hosts the c10d store, every other index connects to it.
func RdzvHostConf(index int) string {
	if index == 0 {
		return "is_host=1"
	}
	return "is_host=0"
}
