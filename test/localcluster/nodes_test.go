package localcluster

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
