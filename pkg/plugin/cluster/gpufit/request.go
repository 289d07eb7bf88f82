package gpufit

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
)

// RequestFor is what the job s asks of the nodes: Nodes ranks of PodRequest each, on nodes that
// match the node selector and whose taints the pods tolerate. submit's capacity guard and
// preflight's fit check both judge this request, so they cannot disagree about a job.
func RequestFor(s *jobspec.Spec) Request {
	set := labels.Set{}
	for _, kv := range s.NodeSelector {
		set[kv.Key] = kv.Value
	}
	return Request{Pods: int64(s.Nodes), PerPod: s.PodRequest(), Selector: labels.SelectorFromSet(set), Tolerations: s.PodTolerations(), GPU: s.GPUName()}
}

// RequestForJob is what a Job already made asks of the nodes at pods ranks, read from its pod
// template as the scheduler reads it: `scale` judges a new size by it, as submit judges a spec.
func RequestForJob(job *batchv1.Job, pods int) Request {
	tmpl := &job.Spec.Template.Spec
	perPod := PodRequests(&corev1.Pod{Spec: *tmpl})
	for _, v := range tmpl.Volumes {
		// A memory-backed /dev/shm is memory the pod may take: counted as jobspec.PodRequest
		// counts it for submit, so that scale judges the job as submit did.
		if ed := v.EmptyDir; ed != nil && ed.Medium == corev1.StorageMediumMemory && ed.SizeLimit != nil {
			if mem, ok := perPod[corev1.ResourceMemory]; !ok || mem.Cmp(*ed.SizeLimit) < 0 {
				perPod[corev1.ResourceMemory] = ed.SizeLimit.DeepCopy()
			}
		}
	}
	return Request{
		Pods:        int64(pods),
		PerPod:      perPod,
		Selector:    labels.SelectorFromSet(tmpl.NodeSelector),
		Tolerations: tmpl.Tolerations,
		GPU:         jobspec.GPUResourceOf(job),
	}
}
