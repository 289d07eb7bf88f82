package jobspec

import (
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The GPU resources NVIDIA's device plugin advertises, besides GPUResource: shared GPUs under
// time-slicing's renameByDefault, and MIG slices under the mixed strategy, one resource per
// profile (nvidia.com/mig-1g.10gb, or nvidia.com/mig-1g.10gb.shared when those are shared too).
const SharedGPUResource corev1.ResourceName = "nvidia.com/gpu.shared"

// migResourcePrefix starts the name of every MIG profile's resource.
const migResourcePrefix = "nvidia.com/mig-"

// IsGPUResource reports whether name is a GPU resource of NVIDIA's device plugin: whole or
// time-sliced GPUs (nvidia.com/gpu), renamed shared GPUs (nvidia.com/gpu.shared) or a MIG
// profile (nvidia.com/mig-PROFILE). Other nvidia.com resources (the Network Operator's RDMA and
// SR-IOV devices) are not GPUs: they go with --resource, and capacity does not count them.
func IsGPUResource(name corev1.ResourceName) bool {
	switch {
	case name == GPUResource || name == SharedGPUResource:
		return true
	case strings.HasPrefix(string(name), migResourcePrefix) && len(name) > len(migResourcePrefix):
		return len(validation.IsQualifiedName(string(name))) == 0
	}
	return false
}

// sharedSuffix ends the name of a resource time-slicing renamed (renameByDefault): several
// containers take turns on each of its devices.
const sharedSuffix = ".shared"

// IsSharedGPUResource reports whether name is a GPU resource whose devices are shared by
// time-slicing under their renamed name (nvidia.com/gpu.shared, nvidia.com/mig-1g.10gb.shared):
// what a GPU of it shows is the whole device's, other containers' work included.
func IsSharedGPUResource(name corev1.ResourceName) bool {
	return IsGPUResource(name) && strings.HasSuffix(string(name), sharedSuffix)
}

// IsMIGResource reports whether name is a MIG profile's resource (nvidia.com/mig-PROFILE, a
// shared one included): each device of it is a slice of a GPU.
func IsMIGResource(name corev1.ResourceName) bool {
	return IsGPUResource(name) && strings.HasPrefix(string(name), migResourcePrefix)
}

// ValidateGPUResource checks --gpu-resource: "" (whole GPUs) or a GPU resource (IsGPUResource).
// Whether any node advertises it is the capacity check's to say, since that needs the cluster.
func ValidateGPUResource(name corev1.ResourceName) error {
	if name == "" || IsGPUResource(name) {
		return nil
	}
	return fmt.Errorf("invalid --gpu-resource %q: must be a GPU resource of NVIDIA's device plugin: %s (whole or time-sliced GPUs), "+
		"%s (shared GPUs renamed by time-slicing) or %sPROFILE, such as nvidia.com/mig-1g.10gb (a MIG slice under the mixed strategy); "+
		"other extended resources go with --resource NAME=QUANTITY", name, GPUResource, SharedGPUResource, migResourcePrefix)
}

// GPUResourceOf is the GPU resource a Job built by Build counts its GPUs in: its
// GPUResourceAnnotation, else GPUResource (a Job of whole GPUs, or one submitted before
// --gpu-resource existed).
func GPUResourceOf(job *batchv1.Job) corev1.ResourceName {
	return GPUResourceOr(corev1.ResourceName(job.Annotations[GPUResourceAnnotation]))
}

// validateGPUResource checks --gpu-resource and how it goes with --gpus and --resource; it is
// part of validateResources.
func (s *Spec) validateGPUResource() []error {
	if s.GPUResourceName == "" {
		return nil
	}
	if err := ValidateGPUResource(s.GPUResourceName); err != nil {
		return []error{err}
	}
	if s.GPUs == 0 && s.GPUResourceName != GPUResource {
		// Without a count the flag would ask for nothing: say so rather than drop it.
		return []error{fmt.Errorf("--gpu-resource %s needs --gpus of 1 or more: --gpus counts it", s.GPUResourceName)}
	}
	return nil
}
