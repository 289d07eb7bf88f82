package gpufit

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func node(name string, gpus int64, lbls ...string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	for i := 0; i+1 < len(lbls); i += 2 {
		n.Labels[lbls[i]] = lbls[i+1]
	}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("96")}
	if gpus >= 0 {
		n.Status.Allocatable[GPUResource] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	return n
}

func TestCheck(t *testing.T) {
	h100 := labels.SelectorFromSet(labels.Set{"gpu": "h100"})
	twoByEight := []corev1.Node{node("a", 8, "gpu", "h100"), node("b", 8, "gpu", "h100")}
	tests := []struct {
		name    string
		nodes   []corev1.Node
		req     Request
		wantErr string // empty: fits
	}{
		{"fits exactly", twoByEight, Request{GPUsPerPod: 8, Pods: 2}, ""},
		{"fits with room", twoByEight, Request{GPUsPerPod: 4, Pods: 3}, ""},
		{"zero gpus never checked", nil, Request{GPUsPerPod: 0, Pods: 5}, ""},
		{"no nodes", nil, Request{GPUsPerPod: 1, Pods: 1}, "No nvidia.com/gpu resources allocatable on the cluster"},
		{"cpu-only nodes", []corev1.Node{node("c", -1), node("d", 0)}, Request{GPUsPerPod: 1, Pods: 1}, "GPU Operator"},
		{"too few in total", twoByEight, Request{GPUsPerPod: 8, Pods: 3}, "needs 24 nvidia.com/gpu (8 per node x 3 nodes) but the cluster has only 16 allocatable"},
		{"a rank cannot span nodes", twoByEight, Request{GPUsPerPod: 16, Pods: 1}, "a rank cannot span nodes and the cluster can hold only 0 such ranks (16 GPUs in all, at most 8 on one node)"},
		{"fragmented", []corev1.Node{node("a", 6), node("b", 6)}, Request{GPUsPerPod: 4, Pods: 3}, "can hold only 2 such ranks"},
		{"selector matches", append(twoByEight, node("x", 8, "gpu", "a100")), Request{GPUsPerPod: 8, Pods: 2, Selector: h100}, ""},
		{"selector matches none", []corev1.Node{node("x", 8, "gpu", "a100")}, Request{GPUsPerPod: 1, Pods: 1, Selector: h100}, "no node with nvidia.com/gpu matches --node-selector gpu=h100 (1 GPU nodes with 8 GPUs in total exist)"},
		{"selector too small", append(twoByEight, node("x", 8, "gpu", "a100")), Request{GPUsPerPod: 8, Pods: 3, Selector: h100}, "but the 2 nodes matching --node-selector gpu=h100 have only 16 allocatable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(Summarize(tc.nodes, tc.req), tc.req)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Check() = %v, want it to fit", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Check() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestNoGPUsIsTheContractError(t *testing.T) {
	if err := Check(Summarize(nil, Request{GPUsPerPod: 1, Pods: 1}), Request{GPUsPerPod: 1, Pods: 1}); !errors.Is(err, ErrNoGPUs) {
		t.Fatalf("got %v, want ErrNoGPUs", err)
	}
}

func TestSummarize(t *testing.T) {
	nodes := []corev1.Node{node("a", 8), node("b", 3), node("c", -1)}
	s := Summarize(nodes, Request{GPUsPerPod: 2, Pods: 1})
	want := Summary{Nodes: 3, GPUNodes: 2, TotalGPUs: 11, MatchingNodes: 2, MatchingGPUs: 11, LargestNode: 8, PodsThatFit: 5}
	if s != want {
		t.Fatalf("Summarize() = %+v, want %+v", s, want)
	}
}

func BenchmarkSummarize5000Nodes(b *testing.B) {
	nodes := make([]corev1.Node, 5000)
	for i := range nodes {
		nodes[i] = node(fmt.Sprintf("n%d", i), 8, "gpu", "h100")
	}
	req := Request{GPUsPerPod: 8, Pods: 64, Selector: labels.SelectorFromSet(labels.Set{"gpu": "h100"})}
	b.ReportAllocs()
	for b.Loop() {
		Summarize(nodes, req)
	}
}
