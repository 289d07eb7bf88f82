package localcluster

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

func TestBuildNode(t *testing.T) {
	n := BuildNode(3, NodeShape{GPUs: 8, KubeletPort: 10250}, time.Now())
	if n.Name != "gpu-node-3" {
		t.Errorf("name = %s", n.Name)
	}
	wantLabels := map[string]string{
		"kubernetes.io/hostname":                "gpu-node-3",
		"type":                                  "kwok",
		"nvidia.com/gpu.product":                "NVIDIA-H100-80GB-HBM3",
		"nvidia.com/gpu.count":                  "8",
		"nvidia.com/gpu.present":                "true",
		"nvidia.com/cuda.driver-version.major":  "580",
		"nvidia.com/cuda.driver-version.minor":  "95",
		"nvidia.com/cuda.driver-version.rev":    "05",
		"nvidia.com/cuda.runtime-version.major": "13",
		"nvidia.com/cuda.runtime-version.minor": "0",
		"node.kubernetes.io/instance-type":      "sim-8x-h100",
	}
	for k, v := range wantLabels {
		if got := n.Labels[k]; got != v {
			t.Errorf("label %s = %q, want %q", k, got, v)
		}
	}
	if n.Annotations[KwokNodeAnnotation] != "fake" {
		t.Errorf("annotation %s = %q, want fake", KwokNodeAnnotation, n.Annotations[KwokNodeAnnotation])
	}
	want := map[corev1.ResourceName]string{"cpu": "96", "memory": "1Ti", "pods": "110", GPUResource: "8"}
	for _, list := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
		if len(list) != len(want) {
			t.Errorf("resources = %v, want exactly %v", list, want)
		}
		for name, v := range want {
			q := list[name]
			if q.Cmp(resource.MustParse(v)) != 0 {
				t.Errorf("%s = %s, want %s", name, q.String(), v)
			}
		}
	}
	if n.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
		t.Errorf("kubelet port = %d; the apiserver fetches logs there", n.Status.DaemonEndpoints.KubeletEndpoint.Port)
	}
	ready := false
	for _, c := range n.Status.Conditions {
		ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
	}
	if !ready {
		t.Error("node not created Ready")
	}
	if got := BuildNode(0, NodeShape{GPUs: 4}, time.Now()).Labels["nvidia.com/gpu.count"]; got != "4" {
		t.Errorf("gpu.count for a 4-GPU node = %s", got)
	}
}

func TestNodeIndex(t *testing.T) {
	for name, want := range map[string]int{"gpu-node-0": 0, "gpu-node-4999": 4999} {
		if got, ok := nodeIndex(name); !ok || got != want {
			t.Errorf("nodeIndex(%s) = %d, %v", name, got, ok)
		}
	}
	for _, name := range []string{"gpu-node-", "gpu-node-01", "gpu-node--1", "other-1", "gpu-node-x"} {
		if _, ok := nodeIndex(name); ok {
			t.Errorf("nodeIndex(%s) accepted", name)
		}
	}
}

func TestEnsureNodesCreatesMissingAndDeletesSurplus(t *testing.T) {
	foreign := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "real-node"}}
	cs := fake.NewClientset(foreign, BuildNode(1, NodeShape{GPUs: 8}, time.Now()), BuildNode(7, NodeShape{GPUs: 8}, time.Now()))
	ctx := context.Background()
	if err := EnsureNodes(ctx, cs, 3, NodeShape{GPUs: 8}, 4); err != nil {
		t.Fatal(err)
	}
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range list.Items {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	if fmt.Sprint(names) != "[gpu-node-0 gpu-node-1 gpu-node-2 real-node]" {
		t.Errorf("nodes = %v; want gpu-node-0..2 and the untouched real-node", names)
	}
}

// Each product's labels are what GFD writes on such a node; all have the same keys, so a
// relabelled node never keeps a label of its former product.
func TestProductLabels(t *testing.T) {
	a100, err := LookupGPUProduct("A100")
	if err != nil {
		t.Fatal(err)
	}
	got := productLabels(a100, 8)
	for k, v := range map[string]string{
		"nvidia.com/gpu.product":               "NVIDIA-A100-SXM4-80GB",
		"nvidia.com/gpu.family":                "ampere",
		"nvidia.com/gpu.memory":                "81920",
		"nvidia.com/gpu.compute.major":         "8",
		"nvidia.com/gpu.compute.minor":         "0",
		"nvidia.com/gpu.machine":               "DGXA100-920-23687-2530-000",
		"nvidia.com/gpu.count":                 "8",
		"nvidia.com/cuda.driver-version.full":  "580.95.05",
		"nvidia.com/cuda.runtime-version.full": "13.0",
		"node.kubernetes.io/instance-type":     "sim-8x-a100",
	} {
		if got[k] != v {
			t.Errorf("A100 label %s = %q, want %q", k, got[k], v)
		}
	}
	want := productLabels(DefaultGPUProduct(), 8)
	seen := map[string]bool{}
	for _, p := range GPUProducts {
		if seen[p.Name] || seen[p.Short] {
			t.Errorf("product %s listed twice", p.Name)
		}
		seen[p.Name], seen[p.Short] = true, true
		labels := productLabels(p, 8)
		if len(labels) != len(want) {
			t.Errorf("%s has %d labels, %s %d", p.Name, len(labels), DefaultGPUProduct().Name, len(want))
		}
		for k := range want {
			if _, ok := labels[k]; !ok {
				t.Errorf("%s lacks the label %s", p.Name, k)
			}
		}
	}
}

func TestLookupGPUProduct(t *testing.T) {
	for name, want := range map[string]string{"h100": "NVIDIA-H100-80GB-HBM3", "a100": "NVIDIA-A100-SXM4-80GB", "nvidia-a100-sxm4-80gb": "NVIDIA-A100-SXM4-80GB"} {
		if p, err := LookupGPUProduct(name); err != nil || p.Name != want {
			t.Errorf("LookupGPUProduct(%s) = %s, %v; want %s", name, p.Name, err, want)
		}
	}
	if _, err := LookupGPUProduct("v100"); err == nil || !strings.Contains(err.Error(), "a100 (NVIDIA-A100-SXM4-80GB)") {
		t.Errorf("unknown product: %v; want the known ones listed", err)
	}
}

// The last nodes get the product, the others the default; count 0 gives back exactly the labels
// the nodes were created with; a node that is not ours is never touched.
func TestRelabelNodes(t *testing.T) {
	ctx := context.Background()
	foreign := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "real-node", Labels: map[string]string{"nvidia.com/gpu.product": "Tesla-T4"}}}
	objs := []runtime.Object{foreign}
	created := map[string]map[string]string{}
	// Index 10 after 2 (sorted by index, not by name), and one node of 4 GPUs.
	for _, i := range []int{0, 10, 2} {
		gpus := 8
		if i == 0 {
			gpus = 4
		}
		n := BuildNode(i, NodeShape{GPUs: gpus}, time.Now())
		created[n.Name] = n.Labels
		objs = append(objs, n)
	}
	cs := fake.NewClientset(objs...)
	a100, _ := LookupGPUProduct("a100")
	labelsOf := func(name string) map[string]string {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Labels
	}

	got, err := RelabelNodes(ctx, cs, a100, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []NodeProduct{{"gpu-node-0", "NVIDIA-H100-80GB-HBM3"}, {"gpu-node-2", "NVIDIA-A100-SXM4-80GB"}, {"gpu-node-10", "NVIDIA-A100-SXM4-80GB"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("RelabelNodes = %v, want %v", got, want)
	}
	for _, n := range want {
		labels := labelsOf(n.Node)
		p, _ := LookupGPUProduct(n.Product)
		gpus, _ := strconv.Atoi(created[n.Node]["nvidia.com/gpu.count"])
		for k, v := range productLabels(p, gpus) {
			if labels[k] != v {
				t.Errorf("%s: label %s = %q, want %q", n.Node, k, labels[k], v)
			}
		}
		if labels["kubernetes.io/hostname"] != n.Node || labels[NodeTypeLabel] != NodeTypeKwok {
			t.Errorf("%s lost its other labels: %v", n.Node, labels)
		}
	}
	if got := labelsOf("gpu-node-0")["nvidia.com/gpu.count"]; got != "4" {
		t.Errorf("gpu-node-0's gpu.count = %s, want its own 4", got)
	}

	if _, err := RelabelNodes(ctx, cs, a100, 0); err != nil {
		t.Fatal(err)
	}
	for name, labels := range created {
		if diff := cmp.Diff(labels, labelsOf(name)); diff != "" {
			t.Errorf("%s after relabelling back (-created +now):\n%s", name, diff)
		}
	}
	if got := labelsOf("real-node"); len(got) != 1 || got["nvidia.com/gpu.product"] != "Tesla-T4" {
		t.Errorf("a node not ours was relabelled: %v", got)
	}
	for _, count := range []int{-1, 4} {
		if _, err := RelabelNodes(ctx, cs, a100, count); err == nil || !strings.Contains(err.Error(), "of the 3 simulated nodes") {
			t.Errorf("RelabelNodes(%d) = %v, want a refusal", count, err)
		}
	}
}

// The last nodes advertise MIG slices (7 per GPU) instead of whole GPUs; count 0 gives back
// exactly the resources and labels the nodes were created with; a node not ours is untouched.
func TestMIGNodes(t *testing.T) {
	ctx := context.Background()
	foreign := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "real-node"}}
	objs := []runtime.Object{foreign}
	created := map[string]*corev1.Node{}
	for _, i := range []int{0, 10, 2} {
		gpus := 8
		if i == 0 {
			gpus = 4
		}
		n := BuildNode(i, NodeShape{GPUs: gpus}, time.Now())
		created[n.Name] = n.DeepCopy()
		objs = append(objs, n)
	}
	cs := fake.NewClientset(objs...)
	node := func(name string) *corev1.Node {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	got, err := MIGNodes(ctx, cs, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []NodeResource{{"gpu-node-0", GPUResource}, {"gpu-node-2", MIGResource}, {"gpu-node-10", MIGResource}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("MIGNodes = %v, want %v", got, want)
	}
	for _, n := range want {
		now := node(n.Node)
		gpus, _ := strconv.Atoi(created[n.Node].Labels["nvidia.com/gpu.count"])
		for _, list := range []corev1.ResourceList{now.Status.Capacity, now.Status.Allocatable} {
			q, other := list[n.Resource], MIGResource
			if n.Resource == MIGResource {
				gpus *= MIGSlicesPerGPU
				other = GPUResource
			}
			if _, has := list[other]; q.Value() != int64(gpus) || has {
				t.Errorf("%s advertises %v, want %d %s only", n.Node, list, gpus, n.Resource)
			}
			if n.Resource == MIGResource {
				gpus /= MIGSlicesPerGPU
			}
		}
		if strategy := now.Labels["nvidia.com/mig.strategy"]; (strategy == "mixed") != (n.Resource == MIGResource) {
			t.Errorf("%s: nvidia.com/mig.strategy %q", n.Node, strategy)
		}
	}
	if _, err := MIGNodes(ctx, cs, 0); err != nil {
		t.Fatal(err)
	}
	for name, was := range created {
		now := node(name)
		if diff := cmp.Diff(was.Labels, now.Labels); diff != "" {
			t.Errorf("%s labels after --mig-nodes 0 (-created +now):\n%s", name, diff)
		}
		if !equality.Semantic.DeepEqual(was.Status.Allocatable, now.Status.Allocatable) || !equality.Semantic.DeepEqual(was.Status.Capacity, now.Status.Capacity) {
			t.Errorf("%s resources after --mig-nodes 0: %v, want %v", name, now.Status.Allocatable, was.Status.Allocatable)
		}
	}
	if got := node("real-node"); len(got.Labels) != 0 || len(got.Status.Allocatable) != 0 {
		t.Errorf("a node not ours was changed: %+v", got)
	}
	for _, count := range []int{-1, 4} {
		if _, err := MIGNodes(ctx, cs, count); err == nil || !strings.Contains(err.Error(), "of the 3 simulated nodes") {
			t.Errorf("MIGNodes(%d) = %v, want a refusal", count, err)
		}
	}
}
