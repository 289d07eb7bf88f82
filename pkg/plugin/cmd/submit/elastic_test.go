package submit_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

func elasticArgs(nodes string, extra ...string) []string {
	return append(append([]string{"ddp", "--image", "img", "--gpus", "8", "--nodes", nodes, "--stager-image", "stager:1"}, extra...), "--", "torchrun", "train.py")
}

// busy is a running pod that holds all 8 GPUs of node.
func busy(name, node string) *corev1.Pod {
	return fixture.Pod(name).Namespace("other").Node(node).Phase(corev1.PodRunning).Container(corev1.Container{
		Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{jobspec.GPUResource: *resource.NewQuantity(8, resource.DecimalSI)}},
	}).Obj()
}

func TestSubmitElasticStartsWithWhatFits(t *testing.T) {
	// Four nodes of 8 GPUs, one of them busy: 3 of the 1:4 ranks fit now.
	c := newClient(fixture.GPUNode("a", 8).Obj(), fixture.GPUNode("b", 8).Obj(), fixture.GPUNode("c", 8).Obj(), fixture.GPUNode("d", 8).Obj(), busy("hog", "d"))
	r := run(t, cmdtest.Cmd{NS: "ml", Client: c}, elasticArgs("1:4")...)
	if r.Code != 0 || r.Stdout != "job.batch/ddp created\nservice/ddp created\n" {
		t.Fatalf("got %+v", r)
	}
	if !strings.Contains(r.Stderr, "starting with 3 ranks of 1:4: 3 fit in what is free now; `kubectl tao scale ddp --nodes 4` grows it when there is room\n") {
		t.Errorf("stderr does not say the size and why: %q", r.Stderr)
	}
	lists := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "nodes" {
			lists++
		}
	}
	if lists != 1 {
		t.Errorf("%d lists of the nodes, want 1: the guard and the free count share it", lists)
	}
	job, err := c.BatchV1().Jobs("ml").Get(context.Background(), "ddp", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *job.Spec.Completions != 3 || *job.Spec.Parallelism != 3 || job.Annotations[jobspec.NodesRangeAnnotation] != "1:4" ||
		job.Spec.SuccessPolicy == nil || *job.Spec.BackoffLimitPerIndex != jobspec.DefaultElasticRetries {
		t.Errorf("job spec: completions %v parallelism %v annotations %v successPolicy %v backoffLimitPerIndex %v",
			*job.Spec.Completions, *job.Spec.Parallelism, job.Annotations, job.Spec.SuccessPolicy, job.Spec.BackoffLimitPerIndex)
	}
}

func TestSubmitElasticWaitsForMIN(t *testing.T) {
	c := newClient(fixture.GPUNode("a", 8).Obj(), fixture.GPUNode("b", 8).Obj(), busy("hog", "a"), busy("hog2", "b"))
	r := run(t, cmdtest.Cmd{NS: "ml", Client: c}, elasticArgs("2:2")...)
	if r.Code != 0 || !strings.Contains(r.Stderr, "only 0 fit in what is free now, so the job waits for 2") {
		t.Fatalf("got %+v", r)
	}
}

func TestSubmitElasticRefusals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		server  string
		code    exitcode.Code
		want    string
		created bool
	}{
		{name: "MIN 0", args: elasticArgs("0:2"), code: exitcode.Usage, want: "MIN must be 1 or more"},
		{name: "MIN above MAX", args: elasticArgs("3:2"), code: exitcode.Usage, want: "MIN must not be above MAX"},
		{name: "not numbers", args: elasticArgs("a:b"), code: exitcode.Usage, want: "whole numbers"},
		{name: "retries 0", args: elasticArgs("1:3", "--retries", "0"), code: exitcode.Usage, want: "cannot go with --retries 0"},
		{name: "queue", args: elasticArgs("1:3", "--queue", "gpus"), code: exitcode.Usage, want: "cannot go with --queue"},
		{name: "MIN never fits", args: elasticArgs("3:4"), code: exitcode.NoCapacity, want: ""},
		{name: "old server", args: elasticArgs("1:2"), server: "v1.30.4", code: exitcode.Usage, want: "needs Kubernetes 1.31 or newer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(fixture.GPUNode("a", 8).Obj(), fixture.GPUNode("b", 8).Obj())
			if tc.server != "" {
				c.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: tc.server}
			}
			r := run(t, cmdtest.Cmd{NS: "ml", Client: c}, tc.args...)
			if exitcode.Code(r.Code) != tc.code || !strings.Contains(r.Stderr, tc.want) || r.Stdout != "" {
				t.Errorf("exit %d, want %d; stderr %q lacks %q; stdout %q", r.Code, tc.code, r.Stderr, tc.want, r.Stdout)
			}
			if m := mutations(c); len(m) != 0 {
				t.Errorf("a refusal changed the cluster: %v", m)
			}
		})
	}
}

func TestSubmitElasticDryRunShowsMAX(t *testing.T) {
	r := run(t, cmdtest.Cmd{NS: "ml", Client: newClient()}, elasticArgs("1:3", "--dry-run=client", "-o", "name")...)
	if r.Code != 0 || !strings.Contains(r.Stderr, "shown at 3 ranks, the most of 1:3") {
		t.Fatalf("got %+v", r)
	}
}

func TestSubmitElasticSaysWhatRunsOut(t *testing.T) {
	// Two nodes of 8 GPUs and 40Gi: the 16Gi /dev/shm of each rank, not the GPUs, bounds it.
	small := func(name string) *corev1.Node {
		return fixture.Node(name).Allocatable(corev1.ResourceCPU, "96").Allocatable(corev1.ResourceMemory, "40Gi").GPUs(8).Obj()
	}
	c := newClient(small("a"), small("b"))
	r := run(t, cmdtest.Cmd{NS: "ml", Client: c}, elasticArgs("1:8", "--gpus", "1")...)
	want := "starting with 4 ranks of 1:8: 4 fit in what is free now (memory runs out first, on 2 of the nodes, the memory-backed /dev/shm counted)"
	if r.Code != 0 || !strings.Contains(r.Stderr, want) {
		t.Fatalf("got %+v, want %q", r, want)
	}
}
