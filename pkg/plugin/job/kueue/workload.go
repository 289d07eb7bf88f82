package kueue

import (
	"context"
	"fmt"
	"io"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
)

// JobUIDLabel is the label Kueue puts on a Job's Workload: the Job's UID.
const JobUIDLabel = "kueue.x-k8s.io/job-uid"

// Workloads and ClusterQueues are the resources read beside LocalQueues.
const (
	WorkloadsResource     = "workloads"
	ClusterQueuesResource = "clusterqueues"
)

func gvr(version, res string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: Group, Version: version, Resource: res}
}

// Waiting reports whether job waits in a Kueue queue: labelled for a LocalQueue and suspended.
// Only those jobs have anything to read from Kueue.
func Waiting(job *batchv1.Job) bool {
	return job != nil && jobstatus.Queue(job) != "" && job.Spec.Suspend != nil && *job.Spec.Suspend
}

// WorkloadOf reads what Kueue says of a waiting job: its Workload (found by the Job's UID) and
// whether its ClusterQueue's quota can ever hold it. nil, nil when the job does not wait in a
// queue, Kueue is not installed, or it has made no Workload yet. A queue the user may not read
// (ClusterQueues are cluster-scoped) only leaves NeverFits unknown, and one without Kueue's
// visibility API (see Positions) the position.
func WorkloadOf(ctx context.Context, d discovery.DiscoveryInterface, dyn dynamic.Interface, job *batchv1.Job) (*jobstatus.Workload, error) {
	wl, _, err := workloadOf(ctx, d, dyn, job)
	return wl, err
}

// workloadOf is WorkloadOf that also returns why the position could not be read (the API is
// served but failed), which costs only the position.
func workloadOf(ctx context.Context, d discovery.DiscoveryInterface, dyn dynamic.Interface, job *batchv1.Job) (wl *jobstatus.Workload, posErr, err error) {
	if !Waiting(job) {
		return nil, nil, nil
	}
	version, err := Discover(ctx, d)
	if err != nil || version == "" {
		return nil, nil, err
	}
	list, err := dyn.Resource(gvr(version, WorkloadsResource)).Namespace(job.Namespace).List(ctx,
		metav1.ListOptions{LabelSelector: JobUIDLabel + "=" + string(job.UID)})
	if err != nil {
		return nil, nil, fmt.Errorf("reading the Kueue Workload of job.batch/%s: %w", job.Name, err)
	}
	if len(list.Items) == 0 {
		return nil, nil, nil
	}
	facts := WorkloadFacts(&list.Items[0])
	wl = &facts
	posErr = AddPositions(ctx, d, dyn, []batchv1.Job{*job}, map[types.UID]*jobstatus.Workload{job.UID: wl})
	gpu, gpus := jobspec.GPUResourceOf(job), jobstatus.GPUsPerNode(job)*int64(jobstatus.Nodes(job))
	lq, err := dyn.Resource(GVR(version)).Namespace(job.Namespace).Get(ctx, jobstatus.Queue(job), metav1.GetOptions{})
	if err != nil {
		// The LocalQueue alone leaves the reason at what the Workload says.
		return wl, posErr, nil
	}
	cq, never, _ := clusterQueueOf(ctx, dyn, version, lq, gpu, gpus)
	wl.NeverFits = never
	wl.Queue = QueueFacts(lq, cq, gpu, gpus)
	wl.Queue.SetPosition(wl.Position)
	return wl, posErr, nil
}

// WorkloadFor is WorkloadOf for a command that only adds Kueue's detail to what it shows: a
// job that does not wait in a queue costs nothing (not even the dynamic client), and a failure
// to read is one warning line on warn, not an error.
func WorkloadFor(ctx context.Context, d discovery.DiscoveryInterface, dynamicClient func() (dynamic.Interface, error), job *batchv1.Job, warn io.Writer) *jobstatus.Workload {
	if !Waiting(job) {
		return nil
	}
	dyn, err := dynamicClient()
	if err == nil {
		var wl *jobstatus.Workload
		var posErr error
		if wl, posErr, err = workloadOf(ctx, d, dyn, job); err == nil {
			if posErr != nil {
				fmt.Fprintf(warn, "Warning: could not read job.batch/%s's position in its queue: %v\n", job.Name, posErr)
			}
			return wl
		}
	}
	fmt.Fprintf(warn, "Warning: could not read what Kueue says of job.batch/%s: %v\n", job.Name, err)
	return nil
}

// WorkloadsIn reads the Workloads of namespace ns ("" for all) in one list, by the UID of their
// Job, for list. Without Kueue it returns none.
func WorkloadsIn(ctx context.Context, d discovery.DiscoveryInterface, dyn dynamic.Interface, ns string) (map[types.UID]*jobstatus.Workload, error) {
	version, err := Discover(ctx, d)
	if err != nil || version == "" {
		return nil, err
	}
	list, err := dyn.Resource(gvr(version, WorkloadsResource)).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: JobUIDLabel})
	if err != nil {
		return nil, fmt.Errorf("listing Kueue Workloads: %w", err)
	}
	out := make(map[types.UID]*jobstatus.Workload, len(list.Items))
	for i := range list.Items {
		wl := WorkloadFacts(&list.Items[i])
		out[types.UID(list.Items[i].GetLabels()[JobUIDLabel])] = &wl
	}
	return out, nil
}

// WorkloadFacts reads the conditions that tell a waiting Workload's situations apart.
func WorkloadFacts(u *unstructured.Unstructured) jobstatus.Workload {
	wl := jobstatus.Workload{Name: u.GetName()}
	if active, found, _ := unstructured.NestedBool(u.Object, "spec", "active"); found && !active {
		wl.Inactive = true
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		typ, _ := m["type"].(string)
		status, _ := m["status"].(string)
		reason, _ := m["reason"].(string)
		message, _ := m["message"].(string)
		switch {
		case typ == "QuotaReserved" && status == "False":
			wl.Pending = message
		case typ == "Evicted" && status == "True":
			wl.EvictedReason, wl.EvictedMessage = reason, message
		}
	}
	return wl
}

// Target reads LocalQueue queue of namespace ns and its ClusterQueue (two gets): the
// ClusterQueue's name ("" when the LocalQueue names none) and, as NeverFits, why it can never
// admit a job of gpus of the GPU resource gpu ("" when it can), a missing ClusterQueue included.
// The error is a get's (ClusterQueues are cluster-scoped: a user may not read them).
func Target(ctx context.Context, dyn dynamic.Interface, version, ns, queue string, gpu corev1.ResourceName, gpus int64) (clusterQueue, never string, err error) {
	lq, err := dyn.Resource(GVR(version)).Namespace(ns).Get(ctx, queue, metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	_, never, err = clusterQueueOf(ctx, dyn, version, lq, gpu, gpus)
	return clusterQueueName(lq), never, err
}

// neverFitsIn is NeverFits for the ClusterQueue of LocalQueue lq, read with one get; the error
// is that get's (a user may not read ClusterQueues: they are cluster-scoped).
func neverFitsIn(ctx context.Context, dyn dynamic.Interface, version string, lq *unstructured.Unstructured, gpu corev1.ResourceName, gpus int64) (string, error) {
	if gpus <= 0 {
		return "", nil
	}
	_, never, err := clusterQueueOf(ctx, dyn, version, lq, gpu, gpus)
	return never, err
}

// clusterQueueOf reads the ClusterQueue of LocalQueue lq (nil when it has none or it does not
// exist) and says whether its quota can never hold gpus of gpu (see NeverFits).
func clusterQueueOf(ctx context.Context, dyn dynamic.Interface, version string, lq *unstructured.Unstructured, gpu corev1.ResourceName, gpus int64) (*unstructured.Unstructured, string, error) {
	cqName := clusterQueueName(lq)
	if cqName == "" {
		return nil, "", nil
	}
	cq, err := dyn.Resource(gvr(version, ClusterQueuesResource)).Get(ctx, cqName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Sprintf("LocalQueue %s points at ClusterQueue %s, which does not exist", lq.GetName(), cqName), nil
	}
	if err != nil {
		return nil, "", err
	}
	return cq, NeverFits(cq, gpu, gpus), nil
}

func clusterQueueName(lq *unstructured.Unstructured) string {
	name, _, _ := unstructured.NestedString(lq.Object, "spec", "clusterQueue")
	return name
}

// NeverFits says why the ClusterQueue cq can never admit a job of gpus of the GPU resource gpu
// in all:
// every flavor's nominal quota plus what it may borrow is smaller (Kueue gives all ranks of a
// job one flavor). "" when some flavor can hold it, the job needs no GPUs, or borrowing from a
// cohort has no limit (the cohort's size is not the queue's to know).
func NeverFits(cq *unstructured.Unstructured, gpu corev1.ResourceName, gpus int64) string {
	if gpus <= 0 {
		return ""
	}
	cohort := cohortOf(cq)
	var most int64 = -1
	for _, f := range GPUFlavors(cq, gpu) {
		limit := f.Nominal
		switch {
		case f.BorrowingLimit != nil:
			limit += *f.BorrowingLimit
		case cohort != "":
			return ""
		}
		most = max(most, limit)
	}
	if most < 0 {
		return fmt.Sprintf("needs %d %s, which ClusterQueue %s does not cover", gpus, gpu, cq.GetName())
	}
	if gpus <= most {
		return ""
	}
	return fmt.Sprintf("needs %d %s but ClusterQueue %s can hold at most %d (nominal quota plus what it may borrow), so Kueue can never admit it",
		gpus, gpu, cq.GetName(), most)
}

func quantity(v any) int64 {
	switch x := v.(type) {
	case string:
		if q, err := resource.ParseQuantity(x); err == nil {
			return q.Value()
		}
	case int64:
		return x
	case float64:
		return int64(x)
	}
	return 0
}

// WorkloadReader is WorkloadOf on these clients, for a wait that watches a queued job: Kueue's
// verdict (never admissible, deactivated) ends the wait. nil without a dynamic client.
func WorkloadReader(d discovery.DiscoveryInterface, dyn dynamic.Interface) func(context.Context, *batchv1.Job) (*jobstatus.Workload, error) {
	if dyn == nil {
		return nil
	}
	return func(ctx context.Context, job *batchv1.Job) (*jobstatus.Workload, error) {
		return WorkloadOf(ctx, d, dyn, job)
	}
}
