package capacity_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cluster/nodeusage"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/cmd/capacity"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

func objects() []runtime.Object {
	return []runtime.Object{
		fixture.GPUNode("gpu-b", 8).Label("pool", "gpu").Label(capacity.ProductLabel, "NVIDIA-H100-80GB-HBM3").Obj(), fixture.GPUNode("gpu-a", 8).Label("pool", "gpu").Label(capacity.ProductLabel, "NVIDIA-H100-80GB-HBM3").Obj(), fixture.GPUNode("cpu-0", -1).Label("pool", "gpu").Obj(),
		fixture.Pod("train-0").Namespace("ml").Container(fixture.GPUContainer("c", 8)).Request(corev1.ResourceCPU, "8").Node("gpu-a").Phase(corev1.PodRunning).Obj(),
		fixture.Pod("nb").Namespace("dev").Container(fixture.GPUContainer("c", 2)).Request(corev1.ResourceCPU, "8").Node("gpu-b").Phase(corev1.PodPending).Obj(),
		fixture.Pod("done").Namespace("ml").Container(fixture.GPUContainer("c", 8)).Request(corev1.ResourceCPU, "8").Node("gpu-b").Phase(corev1.PodSucceeded).Obj(),
		fixture.Pod("waiting").Namespace("ml").Container(fixture.GPUContainer("c", 8)).Request(corev1.ResourceCPU, "8").Phase(corev1.PodPending).Obj(),
	}
}

func run(c *fake.Clientset, args ...string) (int, string, string) {
	r := cmdtest.Cmd{NS: "ml", Client: c}.Run(context.Background(), append([]string{"capacity"}, args...)...)
	return r.Code, r.Stdout, r.Stderr
}

func TestCapacityTable(t *testing.T) {
	c := fake.NewClientset(objects()...)
	code, out, errOut := run(c)
	want := `NAME    PRODUCT                 ALLOCATABLE   REQUESTED   FREE
cpu-0   <none>                  0             0           0
gpu-a   NVIDIA-H100-80GB-HBM3   8             8           0
gpu-b   NVIDIA-H100-80GB-HBM3   8             2           6
TOTAL                           16            10          6
`
	if code != 0 || out != want || errOut != "" {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", code, out, want, errOut)
	}
	// One paged list of each, the pods filtered on the server to those that have not ended.
	var lists []string
	for _, a := range c.Actions() {
		l := a.(k8stesting.ListAction).GetListRestrictions()
		lists = append(lists, fmt.Sprintf("%s %s ns=%q fields=%s", a.GetVerb(), a.GetResource().Resource, a.GetNamespace(), l.Fields))
	}
	wantLists := `list pods ns="" fields=status.phase!=Failed,status.phase!=Succeeded; list nodes ns="" fields=`
	if got := strings.Join(lists, "; "); got != wantLists {
		t.Fatalf("requests %s, want %s", got, wantLists)
	}
}

func TestCapacityWide(t *testing.T) {
	_, out, _ := run(fake.NewClientset(objects()...), "-o", "wide", "-l", "pool=gpu,nvidia.com/gpu.product")
	if !strings.Contains(out, "CPU-FREE") || !strings.Contains(out, "gpu-a   NVIDIA-H100-80GB-HBM3   8             8           0      88/96      1Ti/1Ti       1") || strings.Contains(out, "cpu-0") {
		t.Fatalf("stdout:\n%s", out)
	}
}

func TestCapacityJSON(t *testing.T) {
	_, out, _ := run(fake.NewClientset(objects()...), "-o", "json")
	compact := strings.Join(strings.Fields(out), "")
	want := `{"nodes":[{"name":"cpu-0","product":"","allocatable":0,"requested":0,"free":0},` +
		`{"name":"gpu-a","product":"NVIDIA-H100-80GB-HBM3","allocatable":8,"requested":8,"free":0},` +
		`{"name":"gpu-b","product":"NVIDIA-H100-80GB-HBM3","allocatable":8,"requested":2,"free":6}],` +
		`"total":{"allocatable":16,"requested":10,"free":6}}`
	if compact != want {
		t.Fatalf("got %s\nwant %s", compact, want)
	}
	_, out, _ = run(fake.NewClientset(), "-o", "json")
	if strings.Join(strings.Fields(out), "") != `{"nodes":[],"total":{"allocatable":0,"requested":0,"free":0}}` {
		t.Fatalf("empty cluster: %s", out)
	}
}

func TestCapacityOtherGPUResources(t *testing.T) {
	// A mixed cluster: one node of whole GPUs, one of MIG slices (mixed strategy), one sharing
	// its GPUs under renameByDefault; two slices are in use.
	c := fake.NewClientset(
		fixture.GPUNode("whole", 8).Obj(),
		fixture.GPUNode("mig", -1).Allocatable("nvidia.com/mig-1g.10gb", "7").Allocatable("nvidia.com/mig-3g.40gb", "1").Allocatable("nvidia.com/hostdev", "2").Obj(),
		fixture.GPUNode("shared", -1).Allocatable("nvidia.com/gpu.shared", "16").Obj(),
		fixture.Pod("slices").Namespace("ml").Container(corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("2")}}}).Node("mig").Phase(corev1.PodRunning).Obj(),
	)
	code, out, _ := run(c)
	want := `NAME     PRODUCT   ALLOCATABLE   REQUESTED   FREE   GPU.SHARED   MIG-1G.10GB   MIG-3G.40GB
mig      <none>    0             0           0      -            5/7           1/1
shared   <none>    0             0           0      16/16        -             -
whole    <none>    8             0           8      -            -             -
TOTAL              8             0           8      16/16        5/7           1/1
`
	if code != 0 || out != want {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s", code, out, want)
	}
	_, out, _ = run(c, "-o", "json")
	compact := strings.Join(strings.Fields(out), "")
	wantJSON := `{"nodes":[{"name":"mig","product":"","allocatable":0,"requested":0,"free":0,"otherGPUResources":{` +
		`"nvidia.com/mig-1g.10gb":{"allocatable":7,"requested":2,"free":5},"nvidia.com/mig-3g.40gb":{"allocatable":1,"requested":0,"free":1}}},` +
		`{"name":"shared","product":"","allocatable":0,"requested":0,"free":0,"otherGPUResources":{"nvidia.com/gpu.shared":{"allocatable":16,"requested":0,"free":16}}},` +
		`{"name":"whole","product":"","allocatable":8,"requested":0,"free":8}],` +
		`"total":{"allocatable":8,"requested":0,"free":8,"otherGPUResources":{"nvidia.com/gpu.shared":{"allocatable":16,"requested":0,"free":16},` +
		`"nvidia.com/mig-1g.10gb":{"allocatable":7,"requested":2,"free":5},"nvidia.com/mig-3g.40gb":{"allocatable":1,"requested":0,"free":1}}}}`
	if compact != wantJSON {
		t.Fatalf("got %s\nwant %s", compact, wantJSON)
	}
}

func TestCapacityPages(t *testing.T) {
	c := fake.NewClientset()
	calls := 0
	c.PrependReactor("list", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		l := &corev1.NodeList{Items: []corev1.Node{*fixture.GPUNode(fmt.Sprintf("n%d", calls), 4).Label("pool", "gpu").Obj()}}
		if calls < 3 {
			l.Continue = fmt.Sprint(calls)
		}
		return true, l, nil
	})
	_, out, _ := run(c, "-o", "json")
	if calls != 3 || !strings.Contains(out, `"allocatable": 12`) {
		t.Fatalf("%d node pages, out %s", calls, out)
	}
}

func TestCapacityErrors(t *testing.T) {
	if code, _, _ := run(fake.NewClientset(), "-o", "bogus"); code != int(exitcode.Usage) {
		t.Errorf("-o bogus: exit %d", code)
	}
	if code, _, _ := run(fake.NewClientset(), "-l", "a=(b"); code != int(exitcode.Usage) {
		t.Errorf("bad selector: exit %d", code)
	}
}

func BenchmarkCapacityReport5000Nodes(b *testing.B) {
	nodes := make([]corev1.Node, 5000)
	pods := make([]corev1.Pod, 2000)
	for i := range nodes {
		nodes[i] = *fixture.GPUNode(fmt.Sprintf("n%d", i), 8).Label("pool", "gpu").Label(capacity.ProductLabel, "NVIDIA-H100-80GB-HBM3").Obj()
	}
	for i := range pods {
		pods[i] = *fixture.Pod(fmt.Sprintf("p%d", i)).Namespace("ml").Container(fixture.GPUContainer("c", 8)).Request(corev1.ResourceCPU, "8").Node(fmt.Sprintf("n%d", i)).Phase(corev1.PodRunning).Obj()
	}
	b.ReportAllocs()
	for b.Loop() {
		usage := map[string]*nodeusage.Usage{}
		nodeusage.AddPods(usage, pods)
		rows := make([]capacity.NodeRow, 0, len(nodes))
		for i := range nodes {
			rows = append(rows, capacity.Row(&nodes[i], usage[nodes[i].Name]))
		}
		capacity.Finish(rows)
	}
}

// --queues shows each ClusterQueue's GPU quota per flavor next to the nodes; without Kueue it
// says so and shows the nodes.
func TestCapacityQueues(t *testing.T) {
	cq := func(name, cohort string, flavors []any, reserved []any, pending, admitted int64) *unstructured.Unstructured {
		spec := map[string]any{"resourceGroups": []any{map[string]any{"flavors": flavors}}}
		if cohort != "" {
			spec["cohortName"] = cohort
		}
		return cmdtest.KueueObject("ClusterQueue", "", name, map[string]any{"spec": spec,
			"status": map[string]any{"pendingWorkloads": pending, "admittedWorkloads": admitted, "flavorsReservation": reserved}})
	}
	gpu := func(flavor, nominal string, extra ...string) any {
		r := map[string]any{"name": "nvidia.com/gpu", "nominalQuota": nominal}
		if len(extra) > 0 {
			r["borrowingLimit"] = extra[0]
		}
		return map[string]any{"name": flavor, "resources": []any{map[string]any{"name": "cpu", "nominalQuota": "100"}, r}}
	}
	used := func(flavor, total string) any {
		return map[string]any{"name": flavor, "resources": []any{map[string]any{"name": "nvidia.com/gpu", "total": total}}}
	}
	queues := []runtime.Object{
		cq("team-b", "org", []any{gpu("a100", "8"), gpu("h100", "16", "8")}, []any{used("h100", "24")}, 3, 2),
		cq("cpu-only", "", []any{map[string]any{"name": "plain", "resources": []any{map[string]any{"name": "cpu", "nominalQuota": "10"}}}}, nil, 0, 0),
		cq("team-a", "", []any{gpu("h100", "16")}, []any{used("h100", "8")}, 1, 1),
	}
	c := fake.NewClientset(objects()...)
	dyn := cmdtest.Kueue(c, queues...)
	r := cmdtest.Cmd{NS: "ml", Client: c, Dynamic: dyn}.Run(context.Background(), "capacity", "--queues")
	want := `NAME    PRODUCT                 ALLOCATABLE   REQUESTED   FREE
cpu-0   <none>                  0             0           0
gpu-a   NVIDIA-H100-80GB-HBM3   8             8           0
gpu-b   NVIDIA-H100-80GB-HBM3   8             2           6
TOTAL                           16            10          6

CLUSTERQUEUE   COHORT   FLAVOR   NOMINAL   BORROW   USED   FREE   PENDING   ADMITTED
cpu-only       <none>   <none>   0         -        0      0      0         0
team-a         <none>   h100     16        -        8      8      1         1
team-b         org      a100     8         -        0      8      3         2
team-b         org      h100     16        8        24     0      3         2
`
	if r.Code != 0 || r.Stdout != want || r.Stderr != "" {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", r.Code, r.Stdout, want, r.Stderr)
	}

	r = cmdtest.Cmd{NS: "ml", Client: c, Dynamic: dyn}.Run(context.Background(), "capacity", "--queues", "-o", "json")
	var rep struct {
		Queues []map[string]any `json:"queues"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil || len(rep.Queues) != 3 {
		t.Fatalf("-o json: %v\n%s", err, r.Stdout)
	}
	got, _ := json.Marshal(rep.Queues[2])
	const wantB = `{"admittedWorkloads":2,"cohort":"org","flavors":[{"borrowingLimit":null,"flavor":"a100","nominal":8,"used":0},` +
		`{"borrowingLimit":8,"flavor":"h100","nominal":16,"used":24}],"name":"team-b","pendingWorkloads":3}`
	if string(got) != wantB {
		t.Errorf("queues[2] = %s\nwant       %s", got, wantB)
	}
	r = cmdtest.Cmd{NS: "ml", Client: c, Dynamic: dyn}.Run(context.Background(), "capacity", "--queues", "-o", "name")
	if !strings.HasSuffix(r.Stdout, "node/gpu-b\nclusterqueue.kueue.x-k8s.io/cpu-only\nclusterqueue.kueue.x-k8s.io/team-a\nclusterqueue.kueue.x-k8s.io/team-b\n") {
		t.Errorf("-o name:\n%s", r.Stdout)
	}

	// Without --queues the JSON has no queues key, and Kueue is not read.
	code, out, _ := run(c, "-o", "json")
	if code != 0 || strings.Contains(out, `"queues"`) {
		t.Errorf("without --queues: exit %d\n%s", code, out)
	}
	// Without Kueue: the nodes, an empty list, and a warning.
	plain := fake.NewClientset(objects()...)
	r = cmdtest.Cmd{NS: "ml", Client: plain}.Run(context.Background(), "capacity", "--queues", "-o", "json")
	if r.Code != 0 || !strings.Contains(r.Stdout, `"queues": []`) || !strings.Contains(r.Stderr, "Kueue is not installed") {
		t.Errorf("no Kueue: exit %d\nstdout %s\nstderr %s", r.Code, r.Stdout, r.Stderr)
	}
	// A user who may not list ClusterQueues gets an error, not a report without them.
	denied := fake.NewClientset(objects()...)
	denyDyn := cmdtest.Kueue(denied)
	denyDyn.PrependReactor("list", "clusterqueues", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "kueue.x-k8s.io", Resource: "clusterqueues"}, "", errors.New("RBAC"))
	})
	r = cmdtest.Cmd{NS: "ml", Client: denied, Dynamic: denyDyn}.Run(context.Background(), "capacity", "--queues")
	if r.Code == 0 || !strings.Contains(r.Stderr, "listing Kueue ClusterQueues") || r.Stdout != "" {
		t.Errorf("forbidden: exit %d\nstdout %s\nstderr %s", r.Code, r.Stdout, r.Stderr)
	}
}
