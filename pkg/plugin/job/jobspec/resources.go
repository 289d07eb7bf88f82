package jobspec

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// GPUToleration tolerates the taint GPU Operator installs and cloud GPU node pools carry, so a
// pod that asks for GPUs can land on the nodes that have them.
var GPUToleration = corev1.Toleration{Key: string(GPUResource), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}

// ParseToleration reads KEY[=VALUE]:EFFECT, as kubectl taint writes taints. Without a value
// the toleration matches any value of KEY (operator Exists). EFFECT may be empty ("KEY:") to
// tolerate every effect. A refused value returns the zero Toleration, never a partial one.
func ParseToleration(s string) (corev1.Toleration, error) {
	kv, effect, ok := strings.Cut(s, ":")
	if !ok {
		return corev1.Toleration{}, fmt.Errorf("--toleration %q: expected KEY[=VALUE]:EFFECT, e.g. nvidia.com/gpu:NoSchedule", s)
	}
	t := corev1.Toleration{Effect: corev1.TaintEffect(effect)}
	switch corev1.TaintEffect(effect) {
	case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		return corev1.Toleration{}, fmt.Errorf("--toleration %q: unknown effect %q: must be NoSchedule, PreferNoSchedule, NoExecute or empty", s, effect)
	}
	key, value, hasValue := strings.Cut(kv, "=")
	if msgs := validation.IsQualifiedName(key); len(msgs) > 0 {
		return corev1.Toleration{}, fmt.Errorf("--toleration %q: invalid key %q: %s", s, key, strings.Join(msgs, "; "))
	}
	t.Key = key
	if !hasValue {
		t.Operator = corev1.TolerationOpExists
		return t, nil
	}
	if msgs := validation.IsValidLabelValue(value); len(msgs) > 0 {
		return corev1.Toleration{}, fmt.Errorf("--toleration %q: invalid value %q: %s", s, value, strings.Join(msgs, "; "))
	}
	t.Operator, t.Value = corev1.TolerationOpEqual, value
	return t, nil
}

// ShmQuantity is the effective /dev/shm size, or nil for none.
func (s *Spec) ShmQuantity() *resource.Quantity {
	size := s.ShmSize
	if size == "" && s.MultiNode() {
		size = DefaultMultiNodeShmSize
	}
	if size == "" {
		return nil
	}
	q, err := resource.ParseQuantity(size)
	if err != nil || q.IsZero() {
		return nil
	}
	return &q
}

// validateResources checks quantities and their relations; it is part of Validate.
func (s *Spec) validateResources() []error {
	var errs []error
	parse := func(flag, v string) *resource.Quantity {
		if v == "" {
			return nil
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("invalid --%s %q: not a Kubernetes quantity (e.g. 8, 500m, 64Gi)", flag, v))
			return nil
		}
		if q.Sign() < 0 {
			errs = append(errs, fmt.Errorf("invalid --%s %q: must not be negative", flag, v))
			return nil
		}
		return &q
	}
	if cpu := parse("cpu", s.CPU); cpu != nil && cpu.IsZero() {
		errs = append(errs, fmt.Errorf("invalid --cpu %q: must be more than 0 (leave it out for no limit)", s.CPU))
	}
	mem := parse("memory", s.Memory)
	if mem != nil && mem.IsZero() {
		errs = append(errs, fmt.Errorf("invalid --memory %q: must be more than 0 (leave it out for no limit)", s.Memory))
	}
	shm := parse("shm-size", s.ShmSize)
	if eff := s.ShmQuantity(); shm != nil || s.ShmSize == "" {
		// /dev/shm is tmpfs charged to the container's memory cgroup: with a memory limit no
		// larger than it, the first big shared tensor would get the pod OOM-killed.
		if eff != nil && mem != nil && eff.Cmp(*mem) >= 0 {
			errs = append(errs, fmt.Errorf("--shm-size %s must be less than --memory %s: /dev/shm counts toward the memory limit",
				eff.String(), mem.String()))
		}
	}
	errs = append(errs, s.validateGPUResource()...)
	seen := map[string]bool{}
	for _, kv := range s.Resources {
		name := corev1.ResourceName(kv.Key)
		switch {
		case name == corev1.ResourceCPU || name == corev1.ResourceMemory || name == s.GPUName():
			errs = append(errs, fmt.Errorf("invalid --resource %q: use --cpu, --memory or --gpus for it", kv.Key))
			continue
		case name == GPUResource:
			// Beside another --gpu-resource it would ask for whole GPUs the count never says.
			errs = append(errs, fmt.Errorf("invalid --resource %q: a job counts one GPU resource, --gpu-resource %s", kv.Key, s.GPUName()))
			continue
		case !strings.Contains(kv.Key, "/"):
			errs = append(errs, fmt.Errorf("invalid --resource %q: extended resources have a domain, e.g. rdma/ib or nvidia.com/mig-1g.10gb", kv.Key))
			continue
		}
		if msgs := validation.IsQualifiedName(kv.Key); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("invalid --resource %q: %s", kv.Key, strings.Join(msgs, "; ")))
			continue
		}
		q := parse("resource "+kv.Key, kv.Value)
		// Extended resources are counted in whole units: the API server refuses fractions. An
		// empty value is no quantity at all (parse lets "" through for the optional --cpu).
		if kv.Value == "" || q != nil && (q.IsZero() || q.MilliValue()%1000 != 0) {
			errs = append(errs, fmt.Errorf("invalid --resource %s=%s: must be a whole number above 0", kv.Key, kv.Value))
		}
		seen[kv.Key] = true
	}
	if s.Deadline != nil && *s.Deadline < 1e9 {
		errs = append(errs, fmt.Errorf("invalid --deadline %s: must be at least 1s", s.Deadline))
	}
	for flag, name := range map[string]string{"priority-class": s.PriorityClass, "service-account": s.ServiceAccount} {
		if name == "" {
			continue
		}
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("invalid --%s %q: %s", flag, name, strings.Join(msgs, "; ")))
		}
	}
	if s.OneRankPerNode && !s.MultiNode() {
		errs = append(errs, fmt.Errorf("--one-rank-per-node needs --nodes of 2 or more"))
	}
	return errs
}

// resources builds the container's requests and limits. Requests equal limits: training pods
// should be Guaranteed-class, and the scheduler then reserves what the job will really use.
func (s *Spec) resources() corev1.ResourceRequirements {
	list := corev1.ResourceList{}
	if s.GPUs > 0 {
		list[s.GPUName()] = *resource.NewQuantity(int64(s.GPUs), resource.DecimalSI)
	}
	if s.CPU != "" {
		list[corev1.ResourceCPU] = resource.MustParse(s.CPU)
	}
	if s.Memory != "" {
		list[corev1.ResourceMemory] = resource.MustParse(s.Memory)
	}
	for _, kv := range s.Resources {
		list[corev1.ResourceName(kv.Key)] = resource.MustParse(kv.Value)
	}
	if len(list) == 0 {
		return corev1.ResourceRequirements{}
	}
	r := corev1.ResourceRequirements{Limits: list}
	// Extended resources default their request to the limit; cpu and memory are set explicitly
	// so the manifest says what the scheduler will see.
	if s.CPU != "" || s.Memory != "" {
		r.Requests = corev1.ResourceList{}
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := list[name]; ok {
				r.Requests[name] = q
			}
		}
	}
	return r
}

// tolerations are the user's plus, for GPU pods, the nvidia.com/gpu taint's. Its key stays
// nvidia.com/gpu whatever --gpu-resource says: the GPU Operator and cloud GPU node pools taint a
// GPU node with that key, whether it hands out whole GPUs, MIG slices or shared GPUs.
func (s *Spec) tolerations() []corev1.Toleration {
	out := append([]corev1.Toleration(nil), s.Tolerations...)
	if s.GPUs > 0 && !s.NoGPUToleration {
		for _, t := range out {
			if t.Key == string(GPUResource) && (t.Effect == "" || t.Effect == corev1.TaintEffectNoSchedule) {
				return out
			}
		}
		out = append(out, GPUToleration)
	}
	return out
}

// PodRequest is what one rank needs from a node, for the capacity check: its limits, with
// memory raised to the /dev/shm size when that is larger (tmpfs pages are node memory too).
func (s *Spec) PodRequest() corev1.ResourceList {
	list := s.resources().Limits.DeepCopy()
	if list == nil {
		list = corev1.ResourceList{}
	}
	if shm := s.ShmQuantity(); shm != nil {
		if mem, ok := list[corev1.ResourceMemory]; !ok || mem.Cmp(*shm) < 0 {
			list[corev1.ResourceMemory] = *shm
		}
	}
	return list
}

// PodTolerations are the tolerations every rank's pod carries.
func (s *Spec) PodTolerations() []corev1.Toleration { return s.tolerations() }
