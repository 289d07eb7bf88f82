// Package gpufit decides, from Node objects alone, whether a job's ranks can ever be placed.
// It is pure: the caller lists the nodes.
package gpufit

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// GPUResource is the extended resource NVIDIA's device plugin advertises.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// ErrNoGPUs is the contract's message when no node advertises any GPU.
var ErrNoGPUs = errors.New("No nvidia.com/gpu resources allocatable on the cluster: " +
	"install the NVIDIA GPU Operator (or the NVIDIA device plugin) so that GPU nodes advertise nvidia.com/gpu, " +
	"see https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/getting-started.html")

// Request is what a job asks for: Pods ranks of GPUsPerPod GPUs each, on nodes that match
// Selector.
type Request struct {
	GPUsPerPod int64
	Pods       int64
	Selector   labels.Selector
}

// Summary is what the nodes can hold for a request.
type Summary struct {
	// Nodes is every node seen; GPUNodes those with any allocatable GPU.
	Nodes, GPUNodes int
	// TotalGPUs is allocatable over all nodes, whatever the selector.
	TotalGPUs int64
	// MatchingNodes are the GPU nodes that match the selector, holding MatchingGPUs.
	MatchingNodes int
	MatchingGPUs  int64
	// LargestNode is the most GPUs any matching node has.
	LargestNode int64
	// PodsThatFit is the sum over matching nodes of floor(allocatable / GPUsPerPod): a pod
	// cannot span nodes, so this, not the plain sum, bounds the ranks.
	PodsThatFit int64
}

// Summarize counts what nodes can hold for r. Allocatable, not free: this answers "can it ever
// run", not "can it run now".
func Summarize(nodes []corev1.Node, r Request) Summary {
	var s Summary
	sel := r.Selector
	if sel == nil {
		sel = labels.Everything()
	}
	for i := range nodes {
		n := &nodes[i]
		s.Nodes++
		q, ok := n.Status.Allocatable[GPUResource]
		gpus := q.Value()
		if !ok || gpus <= 0 {
			continue
		}
		s.GPUNodes++
		s.TotalGPUs += gpus
		if !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		s.MatchingNodes++
		s.MatchingGPUs += gpus
		s.LargestNode = max(s.LargestNode, gpus)
		if r.GPUsPerPod > 0 {
			s.PodsThatFit += gpus / r.GPUsPerPod
		}
	}
	return s
}

// Check explains why r can never run on nodes summarized by s, or returns nil when it can.
func Check(s Summary, r Request) error {
	if r.GPUsPerPod <= 0 {
		return nil
	}
	if s.TotalGPUs == 0 {
		return ErrNoGPUs
	}
	need := r.GPUsPerPod * r.Pods
	where := "the cluster"
	if r.Selector != nil && !r.Selector.Empty() {
		if s.MatchingNodes == 0 {
			return fmt.Errorf("no node with nvidia.com/gpu matches --node-selector %s (%d GPU nodes with %d GPUs in total exist)",
				r.Selector, s.GPUNodes, s.TotalGPUs)
		}
		where = fmt.Sprintf("the %d nodes matching --node-selector %s", s.MatchingNodes, r.Selector)
	}
	if s.MatchingGPUs < need {
		return fmt.Errorf("the job needs %d nvidia.com/gpu (%d per node x %d nodes) but %s %s only %d allocatable",
			need, r.GPUsPerPod, r.Pods, where, hasHave(s.MatchingNodes, where), s.MatchingGPUs)
	}
	if s.PodsThatFit < r.Pods {
		return fmt.Errorf("the job needs %d ranks of %d nvidia.com/gpu each, but a rank cannot span nodes and %s can hold only %d such ranks "+
			"(%d GPUs in all, at most %d on one node): lower --gpus and raise --nodes",
			r.Pods, r.GPUsPerPod, where, s.PodsThatFit, s.MatchingGPUs, s.LargestNode)
	}
	return nil
}

func hasHave(n int, where string) string {
	if where == "the cluster" || n == 1 {
		return "has"
	}
	return "have"
}
