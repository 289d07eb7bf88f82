package gpufit

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
)

func TestRequestFor(t *testing.T) {
	q := resource.MustParse
	dedicated := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "ml", Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		name        string
		spec        jobspec.Spec
		pods        int64
		perPod      corev1.ResourceList
		selector    string
		tolerations []corev1.Toleration
		gpu         corev1.ResourceName // "" for whole GPUs
	}{
		{name: "one GPU", spec: jobspec.Spec{GPUs: 1, Nodes: 1}, pods: 1,
			perPod: corev1.ResourceList{jobspec.GPUResource: q("1")}, tolerations: []corev1.Toleration{jobspec.GPUToleration}},
		{name: "no GPU: no GPU toleration", spec: jobspec.Spec{GPUs: 0, Nodes: 1, CPU: "2"}, pods: 1,
			perPod: corev1.ResourceList{corev1.ResourceCPU: q("2")}},
		{name: "memory counts", spec: jobspec.Spec{GPUs: 8, Nodes: 1, Memory: "2Ti"}, pods: 1,
			perPod: corev1.ResourceList{jobspec.GPUResource: q("8"), corev1.ResourceMemory: q("2Ti")}, tolerations: []corev1.Toleration{jobspec.GPUToleration}},
		{name: "multi-node /dev/shm raises memory", spec: jobspec.Spec{GPUs: 8, Nodes: 2}, pods: 2,
			perPod: corev1.ResourceList{jobspec.GPUResource: q("8"), corev1.ResourceMemory: q(jobspec.DefaultMultiNodeShmSize)}, tolerations: []corev1.Toleration{jobspec.GPUToleration}},
		{name: "memory above /dev/shm stays", spec: jobspec.Spec{GPUs: 8, Nodes: 2, Memory: "64Gi", ShmSize: "8Gi"}, pods: 2,
			perPod: corev1.ResourceList{jobspec.GPUResource: q("8"), corev1.ResourceMemory: q("64Gi")}, tolerations: []corev1.Toleration{jobspec.GPUToleration}},
		{name: "extended resources, selector, tolerations",
			spec: jobspec.Spec{GPUs: 4, Nodes: 3, Resources: []jobspec.KeyValue{{Key: "rdma/ib", Value: "1"}},
				NodeSelector: []jobspec.KeyValue{{Key: "pool", Value: "h100"}, {Key: "zone", Value: "a"}}, Tolerations: []corev1.Toleration{dedicated}},
			pods: 3, perPod: corev1.ResourceList{jobspec.GPUResource: q("4"), "rdma/ib": q("1"), corev1.ResourceMemory: q(jobspec.DefaultMultiNodeShmSize)},
			selector: "pool=h100,zone=a", tolerations: []corev1.Toleration{dedicated, jobspec.GPUToleration}},
		{name: "--no-gpu-toleration", spec: jobspec.Spec{GPUs: 1, Nodes: 1, NoGPUToleration: true}, pods: 1,
			perPod: corev1.ResourceList{jobspec.GPUResource: q("1")}},
		{name: "MIG slices: counted as the GPU resource, the nvidia.com/gpu taint tolerated",
			spec: jobspec.Spec{GPUs: 2, Nodes: 1, GPUResourceName: "nvidia.com/mig-1g.10gb"}, pods: 1, gpu: "nvidia.com/mig-1g.10gb",
			perPod: corev1.ResourceList{"nvidia.com/mig-1g.10gb": q("2")}, tolerations: []corev1.Toleration{jobspec.GPUToleration}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := RequestFor(&tc.spec)
			if r.Pods != tc.pods {
				t.Errorf("pods %d, want %d", r.Pods, tc.pods)
			}
			if !equality.Semantic.DeepEqual(tc.perPod, r.PerPod) {
				t.Errorf("per pod %v, want %v", r.PerPod, tc.perPod)
			}
			if got := r.Selector.String(); got != tc.selector {
				t.Errorf("selector %q, want %q", got, tc.selector)
			}
			want := tc.gpu
			if want == "" {
				want = jobspec.GPUResource
			}
			if r.GPUName() != want || r.GPUsPerPod() != int64(tc.spec.GPUs) {
				t.Errorf("GPUs per pod %d of %s, want %d of %s", r.GPUsPerPod(), r.GPUName(), tc.spec.GPUs, want)
			}
			if !equality.Semantic.DeepEqual(tc.tolerations, r.Tolerations) {
				t.Errorf("tolerations %v, want %v", r.Tolerations, tc.tolerations)
			}
		})
	}
}
