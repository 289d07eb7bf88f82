package nodeusage

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/gpufit"
)

// Usage is what the non-terminal pods bound to one node request, and how many they are.
type Usage struct {
	Requested corev1.ResourceList
	Pods      int
}

// AddPods folds pods into usage per node name; pods not bound, or ended, are skipped (see
// gpufit.Requested). Called once per page, so pods need not be kept.
func AddPods(usage map[string]*Usage, pods []corev1.Pod) {
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		u := usage[p.Spec.NodeName]
		if u == nil {
			u = &Usage{Requested: corev1.ResourceList{}}
			usage[p.Spec.NodeName] = u
		}
		u.Pods++
		for name, q := range gpufit.PodRequests(p) {
			cur := u.Requested[name]
			cur.Add(q)
			u.Requested[name] = cur
		}
	}
}

// Requested is usage as gpufit.SummarizeFree takes it.
func Requested(usage map[string]*Usage) map[string]corev1.ResourceList {
	out := make(map[string]corev1.ResourceList, len(usage))
	for node, u := range usage {
		out[node] = u.Requested
	}
	return out
}
