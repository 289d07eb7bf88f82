package gpufit

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

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
	twoByEight := []corev1.Node{fixture.Node("a").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "8").Label("gpu", "h100").Val(), fixture.Node("b").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "8").Label("gpu", "h100").Val()}
	tests := []checkCase{
		{"fits exactly", twoByEight, req(8, 2), ""},
		{"fits with room", twoByEight, req(4, 3), ""},
		{"zero gpus never checked", nil, req(0, 5), ""},
		{"no nodes", nil, req(1, 1), "No nvidia.com/gpu resources allocatable on the cluster"},
		{"cpu-only nodes", []corev1.Node{fixture.Node("c").Allocatable(corev1.ResourceCPU, "96").Val(), fixture.Node("d").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "0").Val()}, req(1, 1), "GPU Operator"},
		{"too few in total", twoByEight, req(8, 3), "needs 24 nvidia.com/gpu (8 per node x 3 nodes) but only 16 are allocatable on the cluster"},
		{"a rank cannot span nodes", twoByEight, req(16, 1), "the job needs 1 rank of 16 nvidia.com/gpu each, but a rank cannot span nodes and the cluster can hold only 0 such ranks (16 GPUs in all, at most 8 on one node)"},
		{"one rank fits", []corev1.Node{fixture.Node("a").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "8").Val()}, req(8, 2), "needs 16 nvidia.com/gpu (8 per node x 2 nodes) but only 8 are allocatable"},
		{"one GPU per node", []corev1.Node{fixture.Node("a").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "1").Val(), fixture.Node("b").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "1").Val()}, req(2, 1), "the job needs 1 rank of 2 nvidia.com/gpu each, but a rank cannot span nodes and the cluster can hold only 0 such ranks (2 GPUs in all, at most 1 on one node)"},
		{"one node asked for", []corev1.Node{fixture.Node("a").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "1").Val()}, req(2, 1), "the job needs 2 nvidia.com/gpu (2 per node x 1 node) but only 1 is allocatable on the cluster"},
		{"one GPU allocatable", []corev1.Node{fixture.Node("a").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "1").Val()}, req(1, 2), "needs 2 nvidia.com/gpu (1 per node x 2 nodes) but only 1 is allocatable"},
		{"fragmented", []corev1.Node{fixture.Node("a").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "6").Val(), fixture.Node("b").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "6").Val()}, req(4, 3), "can hold only 2 such ranks"},
		{"selector matches", append(twoByEight, fixture.Node("x").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "8").Label("gpu", "a100").Val()), sel(req(8, 2), h100), ""},
		{"selector matches none", []corev1.Node{fixture.Node("x").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "8").Label("gpu", "a100").Val()}, sel(req(1, 1), h100), "no node with nvidia.com/gpu matches --node-selector gpu=h100 (the cluster has 1 GPU node with 8 GPUs in all)"},
		{"selector too small", append(twoByEight, fixture.Node("x").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "8").Label("gpu", "a100").Val()), sel(req(8, 3), h100), "but only 16 are allocatable on the nodes matching --node-selector gpu=h100"},
	}
	checkCases(t, tests)
}

func req(gpus, pods int64) Request {
	return Request{Pods: pods, PerPod: corev1.ResourceList{jobspec.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}}
}

func sel(r Request, s labels.Selector) Request { r.Selector = s; return r }

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
		n := fixture.Node(name).Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "8").Val()
		n.Status.Allocatable[corev1.ResourceMemory] = resource.MustParse("1Ti")
		return n
	}
	tests := []checkCase{
		{"tolerated taint", []corev1.Node{fixture.Node("a").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "8").Taints(gpuTaint).Val()}, func() Request { r := req(8, 1); r.Tolerations = []corev1.Toleration{gpuTol}; return r }(), ""},
		{"untolerated taint everywhere", []corev1.Node{fixture.Node("a").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "8").Taints(dedicated).Val()}, req(8, 1), "carry taints the pods do not tolerate (for example dedicated=ml:NoExecute): add --toleration"},
		{"untolerated taint on some", []corev1.Node{fixture.Node("a").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "8").Taints(dedicated).Val(), fixture.Node("b").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "8").Val()}, req(8, 2), "leaving out 1 node with untolerated taints such as dedicated=ml:NoExecute"},
		{"PreferNoSchedule does not block", []corev1.Node{fixture.Node("a").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "8").Taints(soft).Val()}, req(8, 1), ""},
		{"cpu bounds ranks", []corev1.Node{big("a"), big("b")}, withMem(req(4, 4), "64", "1Gi"), "can hold only 2 such ranks (16 GPUs in all, at most 8 on one node): on 2 nodes the cpu a rank asks for is the limit (lower --cpu)"},
		{"memory missing", []corev1.Node{fixture.Node("a").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "8").Val()}, withMem(req(1, 1), "1", "1Gi"), "on 1 node the memory a rank asks for is the limit (lower --memory or --shm-size)"},
		{"everything fits", []corev1.Node{big("a"), big("b")}, withMem(req(4, 4), "48", "500Gi"), ""},
	}
	checkCases(t, tests)
}

// mig is a request of gpus slices of the MIG profile 1g.10gb per rank.
func mig(gpus, pods int64) Request {
	const slice = "nvidia.com/mig-1g.10gb"
	return Request{Pods: pods, GPU: slice, PerPod: corev1.ResourceList{slice: *resource.NewQuantity(gpus, resource.DecimalSI)}}
}

func TestCheckOtherGPUResources(t *testing.T) {
	// A cluster of one whole-GPU node and two MIG nodes (mixed strategy), each of 7 1g.10gb
	// slices, one of which also offers shared GPUs.
	whole := fixture.GPUNode("whole", 8).Val()
	sliced := func(name string) *fixture.NodeWrapper {
		return fixture.GPUNode(name, -1).Allocatable("nvidia.com/mig-1g.10gb", "7").Allocatable("nvidia.com/hostdev", "4")
	}
	mixed := []corev1.Node{whole, sliced("mig-a").Val(), sliced("mig-b").Allocatable("nvidia.com/gpu.shared", "4").Val()}
	shared := Request{Pods: 1, GPU: "nvidia.com/gpu.shared", PerPod: corev1.ResourceList{"nvidia.com/gpu.shared": resource.MustParse("4")}}
	checkCases(t, []checkCase{
		{"slices fit on the sliced nodes", mixed, mig(7, 2), ""},
		{"shared gpus fit on the one node that shares", mixed, shared, ""},
		{"whole gpus fit on the whole node only", mixed, req(8, 1), ""},
		{"whole gpus do not count the slices", mixed, req(8, 2), "needs 16 nvidia.com/gpu (8 per node x 2 nodes) but only 8 are allocatable"},
		{"more slices than one node has", mixed, mig(8, 1), "the job needs 1 rank of 8 nvidia.com/mig-1g.10gb each, but a rank cannot span nodes and the cluster can hold only 0 such ranks (14 nvidia.com/mig-1g.10gb in all, at most 7 on one node)"},
		{"more slices than the cluster has", mixed, mig(7, 3), "the job needs 21 nvidia.com/mig-1g.10gb (7 per node x 3 nodes) but only 14 are allocatable on the cluster"},
		{"a profile no node has", mixed, func() Request {
			r := mig(1, 1)
			r.GPU, r.PerPod = "nvidia.com/mig-3g.40gb", corev1.ResourceList{"nvidia.com/mig-3g.40gb": resource.MustParse("1")}
			return r
		}(), "no node of the cluster advertises nvidia.com/mig-3g.40gb; the GPU resources it has are nvidia.com/gpu (8), nvidia.com/gpu.shared (4), nvidia.com/mig-1g.10gb (14): name one with --gpu-resource"},
		{"whole gpus on a cluster of slices", []corev1.Node{sliced("mig-a").Val()}, req(1, 1), "no node of the cluster advertises nvidia.com/gpu; the GPU resources it has are nvidia.com/mig-1g.10gb (7)"},
		{"slices on a cluster of no gpus", []corev1.Node{fixture.GPUNode("cpu", -1).Val()}, mig(1, 1), "No nvidia.com/gpu resources allocatable on the cluster"},
	})
}

func TestNoGPUsIsTheContractError(t *testing.T) {
	if err := Check(Summarize(nil, req(1, 1)), req(1, 1)); !errors.Is(err, ErrNoGPUs) {
		t.Fatalf("got %v, want ErrNoGPUs", err)
	}
}

func TestSummarize(t *testing.T) {
	nodes := []corev1.Node{fixture.Node("a").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "8").Val(), fixture.Node("b").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "3").Val(), fixture.Node("c").Allocatable(corev1.ResourceCPU, "96").Val()}
	s := Summarize(nodes, req(2, 1))
	want := Summary{Nodes: 3, GPUNodes: 2, TotalGPUs: 11, Offered: corev1.ResourceList{jobspec.GPUResource: resource.MustParse("11")}, SelectedNodes: 2, MatchingNodes: 2, MatchingGPUs: 11, LargestNode: 8, PodsThatFit: 5,
		Bound: map[corev1.ResourceName]int{jobspec.GPUResource: 2}}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Fatalf("Summarize() mismatch (-want +got):\n%s", diff)
	}
}

func BenchmarkSummarize5000Nodes(b *testing.B) {
	nodes := make([]corev1.Node, 5000)
	for i := range nodes {
		nodes[i] = fixture.Node(fmt.Sprintf("n%d", i)).Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "8").Label("gpu", "h100").Val()
	}
	req := sel(req(8, 64), labels.SelectorFromSet(labels.Set{"gpu": "h100"}))
	b.ReportAllocs()
	for b.Loop() {
		Summarize(nodes, req)
	}
}

func TestRequested(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	withInit := fixture.Pod("init").Container(corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{jobspec.GPUResource: *resource.NewQuantity(1, resource.DecimalSI)}}}).Node("a").Phase(corev1.PodRunning).Val()
	withInit.Spec.InitContainers = []corev1.Container{
		{Name: "big-init", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}}},
		{Name: "sidecar", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{jobspec.GPUResource: resource.MustParse("1")}}},
	}
	withInit.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
	withInit.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}
	pods := []corev1.Pod{
		fixture.Pod("run").Container(corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{jobspec.GPUResource: *resource.NewQuantity(4, resource.DecimalSI)}}}).Node("a").Phase(corev1.PodRunning).Val(),
		fixture.Pod("pending-bound").Container(corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{jobspec.GPUResource: *resource.NewQuantity(2, resource.DecimalSI)}}}).Node("a").Phase(corev1.PodPending).Val(),
		fixture.Pod("done").Container(corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{jobspec.GPUResource: *resource.NewQuantity(8, resource.DecimalSI)}}}).Node("a").Phase(corev1.PodSucceeded).Val(),
		fixture.Pod("failed").Container(corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{jobspec.GPUResource: *resource.NewQuantity(8, resource.DecimalSI)}}}).Node("b").Phase(corev1.PodFailed).Val(),
		fixture.Pod("unbound").Container(corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{jobspec.GPUResource: *resource.NewQuantity(8, resource.DecimalSI)}}}).Phase(corev1.PodPending).Val(),
		fixture.Pod("other").Container(corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{jobspec.GPUResource: *resource.NewQuantity(3, resource.DecimalSI)}}}).Node("b").Phase(corev1.PodRunning).Val(),
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
	nodes := []corev1.Node{fixture.Node("a").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "8").Val(), fixture.Node("b").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "8").Val(), fixture.Node("c").Allocatable(corev1.ResourceCPU, "96").Allocatable(jobspec.GPUResource, "8").Val()}
	used := Requested([]corev1.Pod{fixture.Pod("p1").Container(corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{jobspec.GPUResource: *resource.NewQuantity(8, resource.DecimalSI)}}}).Node("a").Phase(corev1.PodRunning).Val(), fixture.Pod("p2").Container(corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{jobspec.GPUResource: *resource.NewQuantity(3, resource.DecimalSI)}}}).Node("b").Phase(corev1.PodRunning).Val(), fixture.Pod("p3").Container(corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{jobspec.GPUResource: *resource.NewQuantity(8, resource.DecimalSI)}}}).Node("zz").Phase(corev1.PodRunning).Val()})
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
	if diff := cmp.Diff(all, SummarizeFree(nodes, nil, r)); diff != "" {
		t.Fatalf("SummarizeFree(nil) mismatch (-want +got):\n%s", diff)
	}
}

func TestFreeNeverNegative(t *testing.T) {
	f := Free(corev1.ResourceList{jobspec.GPUResource: resource.MustParse("2")}, corev1.ResourceList{jobspec.GPUResource: resource.MustParse("3")})
	if q := f[jobspec.GPUResource]; q.Value() != 0 {
		t.Fatalf("Free = %s, want 0", q.String())
	}
}
