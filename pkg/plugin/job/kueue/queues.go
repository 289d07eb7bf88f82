package kueue

import (
	"context"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
)

// ClusterQueue is what `capacity --queues` shows of one ClusterQueue: its GPU quota per flavor
// and its workloads. Its JSON keys are a contract with users' scripts.
type ClusterQueue struct {
	Name string `json:"name"`
	// Cohort is the cohort it may borrow from and lend to, "" for none.
	Cohort   string                  `json:"cohort"`
	Flavors  []jobstatus.FlavorQuota `json:"flavors"`
	Pending  int32                   `json:"pendingWorkloads"`
	Admitted int32                   `json:"admittedWorkloads"`
}

// ClusterQueueFacts reads a ClusterQueue object: its quota of every GPU resource it has one of
// (whole GPUs first, then MIG profiles and shared GPUs by name), per flavor.
func ClusterQueueFacts(cq *unstructured.Unstructured) ClusterQueue {
	c := ClusterQueue{
		Name:     cq.GetName(),
		Cohort:   cohortOf(cq),
		Flavors:  []jobstatus.FlavorQuota{},
		Pending:  count(cq, "pendingWorkloads"),
		Admitted: count(cq, "admittedWorkloads"),
	}
	for _, gpu := range quotaGPUResources(cq) {
		c.Flavors = append(c.Flavors, GPUFlavors(cq, gpu)...)
	}
	return c
}

// quotaGPUResources are the GPU resources the ClusterQueue has quota of, nvidia.com/gpu first.
func quotaGPUResources(cq *unstructured.Unstructured) []corev1.ResourceName {
	seen := map[corev1.ResourceName]bool{}
	for _, fm := range specFlavors(cq) {
		resources, _ := fm["resources"].([]any)
		for _, r := range resources {
			m, _ := r.(map[string]any)
			if name, _ := m["name"].(string); jobspec.IsGPUResource(corev1.ResourceName(name)) {
				seen[corev1.ResourceName(name)] = true
			}
		}
	}
	out := make([]corev1.ResourceName, 0, len(seen))
	for r := range seen {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b corev1.ResourceName) int {
		switch {
		case a == b:
			return 0
		case a == jobspec.GPUResource:
			return -1
		case b == jobspec.GPUResource:
			return 1
		}
		return strings.Compare(string(a), string(b))
	})
	return out
}

// QueueFacts is where a job of gpus of the GPU resource gpu waits: LocalQueue lq and its
// ClusterQueue cq (nil when it could not be read, which leaves the ClusterQueue's part unknown),
// whose quota of gpu it is shown.
func QueueFacts(lq, cq *unstructured.Unstructured, gpu corev1.ResourceName, gpus int64) *jobstatus.QueueState {
	q := &jobstatus.QueueState{
		LocalQueue:        lq.GetName(),
		ClusterQueue:      clusterQueueName(lq),
		LocalQueuePending: count(lq, "pendingWorkloads"),
		GPUs:              gpus,
		Flavors:           []jobstatus.FlavorQuota{},
		Stopped:           []jobstatus.QueueStop{},
	}
	if cq != nil {
		c := ClusterQueueFacts(cq)
		q.ClusterQueuePending, q.ClusterQueueAdmitted, q.Flavors = &c.Pending, &c.Admitted, GPUFlavors(cq, gpu)
		if s := stopOf("ClusterQueue", cq); s != nil {
			q.Stopped = append(q.Stopped, *s)
		}
		q.Inactive = inactiveOf(cq)
	}
	if s := stopOf("LocalQueue", lq); s != nil {
		q.Stopped = append(q.Stopped, *s)
	}
	return q
}

// stopOf is the queue's spec.stopPolicy (v1beta1 and v1beta2 alike) when an admin stopped it:
// Hold or HoldAndDrain; nil for None or none set.
func stopOf(kind string, queue *unstructured.Unstructured) *jobstatus.QueueStop {
	policy, _, _ := unstructured.NestedString(queue.Object, "spec", "stopPolicy")
	if policy == "" || policy == "None" {
		return nil
	}
	return &jobstatus.QueueStop{Kind: kind, Name: queue.GetName(), Policy: policy}
}

// activeStopped is the reason of a ClusterQueue's False Active condition when it is stopped:
// stopOf says that, from its spec, so the condition adds nothing. (Kueue names its first reason
// only, the stop before the others: another cause shows once the queue is resumed.)
const activeStopped = "Stopped"

// inactiveOf is the ClusterQueue's False Active condition, when Kueue set it for another reason
// than a stop (a ResourceFlavor or AdmissionCheck it names does not exist, ...); nil when it is
// active or Kueue has not said yet.
func inactiveOf(cq *unstructured.Unstructured) *jobstatus.QueueInactive {
	conds, _, _ := unstructured.NestedSlice(cq.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] != "Active" || m["status"] != "False" {
			continue
		}
		reason, _ := m["reason"].(string)
		message, _ := m["message"].(string)
		if reason == activeStopped {
			return nil
		}
		return &jobstatus.QueueInactive{Reason: reason, Message: message}
	}
	return nil
}

// GPUFlavors is the ClusterQueue's quota of the GPU resource gpu per flavor, in its spec's
// order, with what its workloads have reserved of each (status.flavorsReservation).
func GPUFlavors(cq *unstructured.Unstructured, gpu corev1.ResourceName) []jobstatus.FlavorQuota {
	used := map[string]int64{}
	reservations, _, _ := unstructured.NestedSlice(cq.Object, "status", "flavorsReservation")
	for _, f := range reservations {
		fm, _ := f.(map[string]any)
		name, _ := fm["name"].(string)
		if r := gpuEntry(fm, gpu); r != nil {
			used[name] = quantity(r["total"])
		}
	}
	out := []jobstatus.FlavorQuota{}
	for _, fm := range specFlavors(cq) {
		r := gpuEntry(fm, gpu)
		if r == nil {
			continue
		}
		name, _ := fm["name"].(string)
		fq := jobstatus.FlavorQuota{Flavor: name, Nominal: quantity(r["nominalQuota"]), Used: used[name]}
		if gpu != jobspec.GPUResource {
			fq.Resource = gpu
		}
		if b, ok := r["borrowingLimit"]; ok {
			limit := quantity(b)
			fq.BorrowingLimit = &limit
		}
		out = append(out, fq)
	}
	return out
}

// specFlavors are the flavors of every resource group of the ClusterQueue's spec, in order.
func specFlavors(cq *unstructured.Unstructured) []map[string]any {
	var out []map[string]any
	groups, _, _ := unstructured.NestedSlice(cq.Object, "spec", "resourceGroups")
	for _, g := range groups {
		gm, _ := g.(map[string]any)
		flavors, _, _ := unstructured.NestedSlice(gm, "flavors")
		for _, f := range flavors {
			if fm, ok := f.(map[string]any); ok {
				out = append(out, fm)
			}
		}
	}
	return out
}

// gpuEntry is the gpu entry of a flavor's resources list, nil when it has none.
func gpuEntry(flavor map[string]any, gpu corev1.ResourceName) map[string]any {
	resources, _ := flavor["resources"].([]any)
	for _, r := range resources {
		m, _ := r.(map[string]any)
		if m["name"] == string(gpu) {
			return m
		}
	}
	return nil
}

// cohortOf is the ClusterQueue's cohort: spec.cohortName in v1beta2, spec.cohort in v1beta1.
func cohortOf(cq *unstructured.Unstructured) string {
	cohort, _, _ := unstructured.NestedString(cq.Object, "spec", "cohortName")
	if cohort == "" {
		cohort, _, _ = unstructured.NestedString(cq.Object, "spec", "cohort")
	}
	return cohort
}

// count reads one of a queue's status counters (0 when Kueue has not written it yet).
func count(u *unstructured.Unstructured, field string) int32 {
	v, _, _ := unstructured.NestedFieldNoCopy(u.Object, "status", field)
	return int32(quantity(v))
}

// ClusterQueues lists the cluster's ClusterQueues, by name (one discovery request and one
// list). installed is false, with none, when Kueue is not installed.
func ClusterQueues(ctx context.Context, d discovery.DiscoveryInterface, dyn dynamic.Interface) (queues []ClusterQueue, installed bool, err error) {
	version, err := Discover(ctx, d)
	if err != nil || version == "" {
		return nil, false, err
	}
	list, err := dyn.Resource(gvr(version, ClusterQueuesResource)).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, true, err
	}
	queues = make([]ClusterQueue, len(list.Items))
	for i := range list.Items {
		queues[i] = ClusterQueueFacts(&list.Items[i])
	}
	sort.Slice(queues, func(i, j int) bool { return queues[i].Name < queues[j].Name })
	return queues, true, nil
}
