package kueue

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
)

// Kueue's visibility API (the VisibilityOnDemand feature, on by default since v0.9) is the only
// place Kueue tells where a pending workload stands in its queues: an aggregated API served by
// the manager, read per LocalQueue. A cluster may not serve it (the feature off, or its
// APIService not installed) and a user may not be allowed to read it: both leave the positions
// unknown, silently, and the pending counts of the queues' status remain.
const (
	VisibilityGroup   = "visibility.kueue.x-k8s.io"
	VisibilityVersion = "v1beta2"
	// PendingWorkloads is the LocalQueue subresource that lists its pending workloads.
	PendingWorkloads = "pendingworkloads"
)

// VisibilityGVR is the visibility API's LocalQueue resource, whose subresource
// PendingWorkloads is read.
var VisibilityGVR = schema.GroupVersionResource{Group: VisibilityGroup, Version: VisibilityVersion, Resource: LocalQueues}

// visibilityServed reports whether the API server serves the visibility API's LocalQueue
// pending workloads (one discovery request). Not served and not allowed to discover are both
// false, nil; another failure (an APIService registered but unavailable) is an error.
func visibilityServed(ctx context.Context, d discovery.DiscoveryInterface) (bool, error) {
	dc := discovery.ToDiscoveryInterfaceWithContext(d)
	list, err := dc.ServerResourcesForGroupVersionWithContext(ctx, VisibilityGroup+"/"+VisibilityVersion)
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering Kueue's visibility API: %w", err)
	}
	for _, r := range list.APIResources {
		if r.Name == LocalQueues+"/"+PendingWorkloads {
			return true, nil
		}
	}
	return false, nil
}

// PositionReader reads the positions of the workloads pending in one LocalQueue, by Workload
// name; see Positions.
type PositionReader func(ctx context.Context, ns, queue string) (map[string]jobstatus.Position, error)

// Positions returns a PositionReader on these clients after one discovery request, or nil
// when the visibility API is not served (or not discoverable by the user). Each read is one
// get; a user the API's RBAC forbids, or a LocalQueue Kueue does not know (yet), reads as no
// positions, not an error.
func Positions(ctx context.Context, d discovery.DiscoveryInterface, dyn dynamic.Interface) (PositionReader, error) {
	served, err := visibilityServed(ctx, d)
	if err != nil || !served {
		return nil, err
	}
	return func(ctx context.Context, ns, queue string) (map[string]jobstatus.Position, error) {
		u, err := dyn.Resource(VisibilityGVR).Namespace(ns).Get(ctx, queue, metav1.GetOptions{}, PendingWorkloads)
		if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading the pending workloads of LocalQueue %s from Kueue's visibility API: %w", queue, err)
		}
		return PendingPositions(u), nil
	}, nil
}

// PendingPositions reads a PendingWorkloadsSummary (the visibility API's answer) into each
// pending workload's positions, by Workload name. Items without a name are skipped.
func PendingPositions(summary *unstructured.Unstructured) map[string]jobstatus.Position {
	items, _, _ := unstructured.NestedSlice(summary.Object, "items")
	out := make(map[string]jobstatus.Position, len(items))
	for _, it := range items {
		m, _ := it.(map[string]any)
		name, _, _ := unstructured.NestedString(m, "metadata", "name")
		if name == "" {
			continue
		}
		// int64 as the API's JSON decodes, float64 as YAML does: quantity reads both.
		out[name] = jobstatus.Position{LocalQueue: int32(quantity(m["positionInLocalQueue"])), ClusterQueue: int32(quantity(m["positionInClusterQueue"]))}
	}
	return out
}

// AddPositions sets the Position of the Workloads (by their Job's UID, as WorkloadsIn reads
// them) of jobs waiting in a queue: one visibility read per LocalQueue they wait in, for list.
// Without the visibility API it changes nothing; the error is the first failed read (the
// positions read before it are kept).
func AddPositions(ctx context.Context, d discovery.DiscoveryInterface, dyn dynamic.Interface, jobs []batchv1.Job, wls map[types.UID]*jobstatus.Workload) error {
	type queueKey struct{ ns, queue string }
	byQueue := map[queueKey][]*jobstatus.Workload{}
	var order []queueKey
	for i := range jobs {
		wl := wls[jobs[i].UID]
		if wl == nil || !Waiting(&jobs[i]) {
			continue
		}
		k := queueKey{jobs[i].Namespace, jobstatus.Queue(&jobs[i])}
		if _, seen := byQueue[k]; !seen {
			order = append(order, k)
		}
		byQueue[k] = append(byQueue[k], wl)
	}
	if len(order) == 0 {
		return nil
	}
	read, err := Positions(ctx, d, dyn)
	if err != nil || read == nil {
		return err
	}
	for _, k := range order {
		pos, err := read(ctx, k.ns, k.queue)
		if err != nil {
			return err
		}
		for _, wl := range byQueue[k] {
			if p, ok := pos[wl.Name]; ok {
				wl.Position = &p
			}
		}
	}
	return nil
}
