package cmdtest

import (
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakedynamic "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/kueue"
)

// KueueGVR is Kueue's resource in the version v0.17 stores (v1beta2).
func KueueGVR(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: kueue.Group, Version: "v1beta2", Resource: resource}
}

// KueueObject is a Kueue object of kind in namespace ns ("" for cluster-scoped ones) with the
// other fields (spec, status, ...) of fields.
func KueueObject(kind, ns, name string, fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: fields}
	u.SetAPIVersion(kueue.Group + "/v1beta2")
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// Kueue installs a fake Kueue v0.17 on c (discovery serves kueue.x-k8s.io/v1beta2) and returns
// the dynamic client that holds its objects.
func Kueue(c *fake.Clientset, objs ...runtime.Object) *fakedynamic.FakeDynamicClient {
	c.Resources = append(c.Resources, &metav1.APIResourceList{GroupVersion: kueue.Group + "/v1beta2",
		APIResources: []metav1.APIResource{{Name: kueue.LocalQueues, Namespaced: true, Kind: "LocalQueue"}}})
	kinds := map[schema.GroupVersionResource]string{}
	for r, kind := range map[string]string{"workloads": "Workload", "localqueues": "LocalQueue", "clusterqueues": "ClusterQueue",
		"resourceflavors": "ResourceFlavor", "workloadpriorityclasses": "WorkloadPriorityClass"} {
		kinds[KueueGVR(r)] = kind + "List"
	}
	return fakedynamic.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), kinds, objs...)
}

// KueueQueued is a fake cluster where job (UID uid-1, in namespace ml) waits in LocalQueue
// team-a: its ClusterQueue gpu-cq has gpus nvidia.com/gpu of quota in flavor h100, 8 of it
// used by another job, 2 workloads pending (1 of them in team-a), and the job's Workload has
// conditions.
func KueueQueued(job *batchv1.Job, gpus string, conditions ...any) (*fake.Clientset, *fakedynamic.FakeDynamicClient) {
	c := fake.NewClientset(job)
	wl := KueueObject("Workload", "ml", "job-train-1", map[string]any{"status": map[string]any{"conditions": conditions}})
	wl.SetLabels(map[string]string{kueue.JobUIDLabel: "uid-1"})
	lq := KueueObject("LocalQueue", "ml", "team-a", map[string]any{"spec": map[string]any{"clusterQueue": "gpu-cq"},
		"status": map[string]any{"pendingWorkloads": int64(1)}})
	cq := KueueObject("ClusterQueue", "", "gpu-cq", map[string]any{"spec": map[string]any{"resourceGroups": []any{map[string]any{
		"flavors": []any{map[string]any{"name": "h100", "resources": []any{map[string]any{"name": "nvidia.com/gpu", "nominalQuota": gpus}}}},
	}}}, "status": map[string]any{"pendingWorkloads": int64(2), "admittedWorkloads": int64(1),
		"flavorsReservation": []any{map[string]any{"name": "h100", "resources": []any{map[string]any{"name": "nvidia.com/gpu", "total": "8"}}}}}})
	return c, Kueue(c, wl, lq, cq)
}

// KueueVisibility adds Kueue's visibility API to a fake Kueue (c and dyn as Kueue made them):
// discovery serves it, and every LocalQueue's pending workloads are pending (each a
// PendingWorkload's fields: metadata.name, positionInLocalQueue, ...).
func KueueVisibility(c *fake.Clientset, dyn *fakedynamic.FakeDynamicClient, pending ...map[string]any) {
	c.Resources = append(c.Resources, &metav1.APIResourceList{GroupVersion: kueue.VisibilityGroup + "/" + kueue.VisibilityVersion,
		APIResources: []metav1.APIResource{{Name: kueue.LocalQueues + "/" + kueue.PendingWorkloads, Namespaced: true, Kind: "PendingWorkloadsSummary", Verbs: []string{"get"}}}})
	items := make([]any, len(pending))
	for i, p := range pending {
		items[i] = p
	}
	dyn.PrependReactor("get", kueue.LocalQueues, func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetResource() != kueue.VisibilityGVR || a.GetSubresource() != kueue.PendingWorkloads {
			return false, nil, nil
		}
		return true, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": kueue.VisibilityGroup + "/" + kueue.VisibilityVersion, "kind": "PendingWorkloadsSummary", "items": items,
		}}, nil
	})
}
