package gpufit

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/jobspec"
)

func node(name string, gpus int64, lbls ...string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	for i := 0; i+1 < len(lbls); i += 2 {
		n.Labels[lbls[i]] = lbls[i+1]
	}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("96")}
	if gpus >= 0 {
		n.Status.Allocatable[jobspec.GPUResource] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	return n
}

type checkCase struct {
	name    string
	nodes   []corev1.Node
	req     Request
	wantErr string // empty: fits
}

// checkCases runs Check on each case's cluster and request.
func checkCases(t *testing.T, tests []checkCase) {
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

func TestCheck(t *testing.T) {
	h100 := labels.SelectorFromSet(labels.Set{"gpu": "h100"})
	twoByEight := []corev1.Node{node("a", 8, "gpu", "h100"), node("b", 8, "gpu", "h100")}
	tests := []checkCase{
		{"fits exactly", twoByEight, req(8, 2), ""},
		{"fits with room", twoByEight, req(4, 3), ""},
		{"zero gpus never checked", nil, req(0, 5), ""},
		{"no nodes", nil, req(1, 1), "No nvidia.com/gpu resources allocatable on the cluster"},
		{"cpu-only nodes", []corev1.Node{node("c", -1), node("d", 0)}, req(1, 1), "GPU Operator"},
		{"too few in total", twoByEight, req(8, 3), "needs 24 nvidia.com/gpu (8 per node x 3 nodes) but only 16 are allocatable on the cluster"},
		{"a rank cannot span nodes", twoByEight, req(16, 1), "a rank cannot span nodes and the cluster can hold only 0 such ranks (16 GPUs in all, at most 8 on one node)"},
		{"fragmented", []corev1.Node{node("a", 6), node("b", 6)}, req(4, 3), "can hold only 2 such ranks"},
		{"selector matches", append(twoByEight, node("x", 8, "gpu", "a100")), sel(req(8, 2), h100), ""},
		{"selector matches none", []corev1.Node{node("x", 8, "gpu", "a100")}, sel(req(1, 1), h100), "no node with nvidia.com/gpu matches --node-selector gpu=h100 (1 GPU nodes with 8 GPUs in total exist)"},
		{"selector too small", append(twoByEight, node("x", 8, "gpu", "a100")), sel(req(8, 3), h100), "but only 16 are allocatable on the nodes matching --node-selector gpu=h100"},
	}
	checkCases(t, tests)
}

func req(gpus, pods int64) Request {
	return Request{Pods: pods, PerPod: corev1.ResourceList{jobspec.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}}
}

func sel(r Request, s labels.Selector) Request { r.Selector = s; return r }

func tainted(n corev1.Node, taints ...corev1.Taint) corev1.Node { n.Spec.Taints = taints; return n }

func TestCheckHonoursTaintsAndResources(t *testing.T) {
	gpuTaint := corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}
	dedicated := corev1.Taint{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoExecute}
	soft := corev1.Taint{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule}
	gpuTol := corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	withMem := func(r Request, cpu, mem string) Request {
		r.PerPod = r.PerPod.DeepCopy()
		r.PerPod[corev1.ResourceCPU], r.PerPod[corev1.ResourceMemory] = resource.MustParse(cpu), resource.MustParse(mem)
		return r
	}
	big := func(name string) corev1.Node {
		n := node(name, 8)
		n.Status.Allocatable[corev1.ResourceMemory] = resource.MustParse("1Ti")
		return n
	}
	tests := []checkCase{
		{"tolerated taint", []corev1.Node{tainted(node("a", 8), gpuTaint)}, func() Request { r := req(8, 1); r.Tolerations = []corev1.Toleration{gpuTol}; return r }(), ""},
		{"untolerated taint everywhere", []corev1.Node{tainted(node("a", 8), dedicated)}, req(8, 1), "carry taints the pods do not tolerate (for example dedicated=ml:NoExecute): add --toleration"},
		{"untolerated taint on some", []corev1.Node{tainted(node("a", 8), dedicated), node("b", 8)}, req(8, 2), "leaving out 1 nodes with untolerated taints such as dedicated=ml:NoExecute"},
		{"PreferNoSchedule does not block", []corev1.Node{tainted(node("a", 8), soft)}, req(8, 1), ""},
		{"cpu bounds ranks", []corev1.Node{big("a"), big("b")}, withMem(req(4, 4), "64", "1Gi"), "can hold only 2 such ranks (16 GPUs in all, at most 8 on one node): on 2 nodes the cpu a rank asks for is the limit (lower --cpu)"},
		{"memory missing", []corev1.Node{node("a", 8)}, withMem(req(1, 1), "1", "1Gi"), "on 1 nodes the memory a rank asks for is the limit (lower --memory or --shm-size)"},
		{"everything fits", []corev1.Node{big("a"), big("b")}, withMem(req(4, 4), "48", "500Gi"), ""},
	}
	checkCases(t, tests)
}

func TestNoGPUsIsTheContractError(t *testing.T) {
	if err := Check(Summarize(nil, req(1, 1)), req(1, 1)); !errors.Is(err, ErrNoGPUs) {
		t.Fatalf("got %v, want ErrNoGPUs", err)
	}
}

func TestSummarize(t *testing.T) {
	nodes := []corev1.Node{node("a", 8), node("b", 3), node("c", -1)}
	s := Summarize(nodes, req(2, 1))
	want := Summary{Nodes: 3, GPUNodes: 2, TotalGPUs: 11, SelectedNodes: 2, MatchingNodes: 2, MatchingGPUs: 11, LargestNode: 8, PodsThatFit: 5,
		Bound: map[corev1.ResourceName]int{jobspec.GPUResource: 2}}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("Summarize() = %+v, want %+v", s, want)
	}
}

func BenchmarkSummarize5000Nodes(b *testing.B) {
	nodes := make([]corev1.Node, 5000)
	for i := range nodes {
		nodes[i] = node(fmt.Sprintf("n%d", i), 8, "gpu", "h100")
	}
	req := sel(req(8, 64), labels.SelectorFromSet(labels.Set{"gpu": "h100"}))
	b.ReportAllocs()
	for b.Loop() {
		Summarize(nodes, req)
	}
}

func pod(name, nodeName string, phase corev1.PodPhase, gpus int64) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.NodeName = nodeName
	p.Status.Phase = phase
	p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{jobspec.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}}}}
	return p
}

func TestRequested(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	withInit := pod("init", "a", corev1.PodRunning, 1)
	withInit.Spec.InitContainers = []corev1.Container{
		{Name: "big-init", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}}},
		{Name: "sidecar", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{jobspec.GPUResource: resource.MustParse("1")}}},
	}
	withInit.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
	withInit.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}
	pods := []corev1.Pod{
		pod("run", "a", corev1.PodRunning, 4),
		pod("pending-bound", "a", corev1.PodPending, 2),
		pod("done", "a", corev1.PodSucceeded, 8),
		pod("failed", "b", corev1.PodFailed, 8),
		pod("unbound", "", corev1.PodPending, 8),
		pod("other", "b", corev1.PodRunning, 3),
		withInit,
	}
	got := Requested(pods)
	gpus := func(n string) int64 { q := got[n][jobspec.GPUResource]; return q.Value() }
	cpu := func(n string) string { q := got[n][corev1.ResourceCPU]; return q.String() }
	// a: 4 + 2 + (1 container + 1 sidecar); b: 3; the ended and unbound pods hold nothing.
	if gpus("a") != 8 || gpus("b") != 3 || len(got) != 2 {
		t.Fatalf("Requested() gpus a=%d b=%d (%d nodes), want 8, 3 on 2 nodes", gpus("a"), gpus("b"), len(got))
	}
	// max(containers 2, init 4) + overhead 0.5
	if cpu("a") != "4500m" {
		t.Fatalf("Requested() cpu on a = %s, want 4500m", cpu("a"))
	}
}

func TestSummarizeFree(t *testing.T) {
	nodes := []corev1.Node{node("a", 8), node("b", 8), node("c", 8)}
	used := Requested([]corev1.Pod{pod("p1", "a", corev1.PodRunning, 8), pod("p2", "b", corev1.PodRunning, 3), pod("p3", "zz", corev1.PodRunning, 8)})
	r := req(4, 3)
	all, free := Summarize(nodes, r), SummarizeFree(nodes, used, r)
	if all.PodsThatFit != 6 || all.TotalGPUs != 24 {
		t.Fatalf("Summarize: %d ranks, %d GPUs; want 6, 24", all.PodsThatFit, all.TotalGPUs)
	}
	// a is full, b has 5 free (one rank of 4), c 8 (two ranks).
	if free.PodsThatFit != 3 || free.TotalGPUs != 13 || free.GPUNodes != 2 {
		t.Fatalf("SummarizeFree: %+v; want 3 ranks on 2 nodes with 13 GPUs", free)
	}
	// b holds one rank of 3, c two: 12 GPUs would do, but ranks cannot span nodes.
	if err := Check(SummarizeFree(nodes, used, req(3, 4)), req(3, 4)); err == nil || !strings.Contains(err.Error(), "can hold only 3 such ranks") {
		t.Fatalf("Check(free) = %v", err)
	}
	// Nothing requested: the same as Summarize.
	if got := SummarizeFree(nodes, nil, r); !reflect.DeepEqual(got, all) {
		t.Fatalf("SummarizeFree(nil) = %+v, want %+v", got, all)
	}
}

func TestFreeNeverNegative(t *testing.T) {
	f := Free(corev1.ResourceList{jobspec.GPUResource: resource.MustParse("2")}, corev1.ResourceList{jobspec.GPUResource: resource.MustParse("3")})
	if q := f[jobspec.GPUResource]; q.Value() != 0 {
		t.Fatalf("Free = %s, want 0", q.String())
	}
}
