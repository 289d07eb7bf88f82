package scale_test

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

var now = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func gpuContainer(gpus int64) corev1.Container {
	return corev1.Container{Name: jobspec.ContainerName, Image: "img", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{jobspec.GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)},
	}}
}

// elastic is a running elastic job of range 1:4 at n ranks, 8 GPUs each.
func elastic(n int32) *batchv1.Job {
	return fixture.Job("ddp").Namespace("default").DefaultSelector().Indexed().Nodes(n).Active(n).
		Annotation(jobspec.NodesRangeAnnotation, "1:4").Container(gpuContainer(8)).Obj()
}

func gpuNodes(n int) []runtime.Object {
	var out []runtime.Object
	for i := range n {
		out = append(out, fixture.Node("gpu-"+itoa(int32(i))).GPUs(8).Obj())
	}
	return out
}

func run(c *fake.Clientset, args ...string) cmdtest.Result {
	return cmdtest.Cmd{Client: c, Now: now}.Run(context.Background(), append([]string{"scale"}, args...)...)
}

func patches(c *fake.Clientset) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "patch" {
			n++
		}
	}
	return n
}

func TestScaleGrowsAndShrinksInOnePatch(t *testing.T) {
	for _, tc := range []struct {
		from, to int32
		want     string
	}{{2, 4, "from 2 to 4 ranks (elastic 1:4)"}, {4, 1, "from 4 to 1 rank (elastic 1:4)"}} {
		c := fake.NewClientset(append(gpuNodes(4), elastic(tc.from))...)
		r := run(c, "ddp", "--nodes", itoa(tc.to))
		if r.Code != 0 {
			t.Fatalf("%d -> %d: exit %d: %s", tc.from, tc.to, r.Code, r.Stderr)
		}
		if r.Stdout != "job.batch/ddp scaled\n" {
			t.Errorf("stdout %q, want kubectl scale's line", r.Stdout)
		}
		if !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("stderr %q lacks %q", r.Stderr, tc.want)
		}
		got, err := c.BatchV1().Jobs("default").Get(context.Background(), "ddp", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *got.Spec.Parallelism != tc.to || *got.Spec.Completions != tc.to {
			t.Errorf("parallelism %d, completions %d, want both %d", *got.Spec.Parallelism, *got.Spec.Completions, tc.to)
		}
		if p := patches(c); p != 1 {
			t.Errorf("%d patches, want 1", p)
		}
	}
}

func TestScaleRefusesWithoutChangingAnything(t *testing.T) {
	fixed := fixture.Job("fixed").Namespace("default").DefaultSelector().Indexed().Nodes(2).Active(2).Container(gpuContainer(8)).Obj()
	done := elastic(2)
	done.Name = "done"
	done.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue},
	}
	for _, tc := range []struct {
		name string
		args []string
		code exitcode.Code
		want string
	}{
		{"not elastic", []string{"fixed", "--nodes", "3"}, exitcode.Usage, "is not elastic"},
		{"above MAX", []string{"ddp", "--nodes", "5"}, exitcode.Usage, "from 1 to 4 ranks"},
		{"zero", []string{"ddp", "--nodes", "0"}, exitcode.Usage, "must be 1 or more"},
		{"not a number", []string{"ddp", "--nodes", "two"}, exitcode.Usage, "invalid argument"},
		{"zero --timeout", []string{"ddp", "--nodes", "3", "--wait", "--timeout", "0s"}, exitcode.Usage, "invalid --timeout 0s"},
		{"no --nodes", []string{"ddp"}, exitcode.Usage, "nodes"},
		{"finished", []string{"done", "--nodes", "3"}, exitcode.Usage, "has finished"},
		{"missing", []string{"nope", "--nodes", "3"}, exitcode.NotFound, "not found"},
		{"no room ever", []string{"ddp", "--nodes", "4"}, exitcode.NoCapacity, ""},
		{"bad -o", []string{"ddp", "--nodes", "3", "-o", "bogus"}, exitcode.Usage, "bogus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Three nodes of 8 GPUs: 4 ranks of 8 can never fit.
			c := fake.NewClientset(append(gpuNodes(3), elastic(2), fixed, done)...)
			r := run(c, tc.args...)
			if exitcode.Code(r.Code) != tc.code || !strings.Contains(r.Stderr, tc.want) {
				t.Errorf("exit %d, want %d; stderr %q lacks %q", r.Code, tc.code, r.Stderr, tc.want)
			}
			if r.Stdout != "" {
				t.Errorf("stdout %q on a refusal", r.Stdout)
			}
			if p := patches(c); p != 0 {
				t.Errorf("%d patches on a refusal", p)
			}
		})
	}
}

func TestScaleWait(t *testing.T) {
	c := fake.NewClientset(append(gpuNodes(4), elastic(2))...)
	// The Job controller: after the patch the job runs at its new size.
	c.PrependReactor("get", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := c.Tracker().Get(a.GetResource(), a.GetNamespace(), "ddp")
		if err != nil {
			return true, nil, err
		}
		j := obj.(*batchv1.Job).DeepCopy()
		n := *j.Spec.Completions
		j.Status.Active, j.Status.Ready = n, &n
		return true, j, nil
	})
	// Rank 0 runs, but its log (the fake's "fake logs") holds no torchrun rendezvous: the ranks
	// run, and the wait for the new world size runs out (jobscale tests the rendezvous line).
	rank0 := fixture.RankPod(elastic(2), 0).Name("ddp-0").Phase(corev1.PodRunning).Obj()
	if _, err := c.CoreV1().Pods("default").Create(context.Background(), rank0, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := run(c, "ddp", "--nodes", "3", "--wait", "--timeout", "3s")
	if exitcode.Code(r.Code) != exitcode.Timeout || !strings.Contains(r.Stderr, "runs 3 ranks") ||
		!strings.Contains(r.Stderr, "3 ranks run, but rank 0's torchrun logged no rendezvous since the change within 3s") {
		t.Fatalf("exit %d: %s", r.Code, r.Stderr)
	}

	stuck := fake.NewClientset(append(gpuNodes(4), elastic(2))...)
	r = run(stuck, "ddp", "--nodes", "3", "--wait", "--timeout", "1500ms")
	if exitcode.Code(r.Code) != exitcode.Timeout || !strings.Contains(r.Stderr, "0 of 3 ranks ready, 2 active") {
		t.Errorf("a size never reached: exit %d, stderr %q", r.Code, r.Stderr)
	}
}

func itoa(n int32) string { return resource.NewQuantity(int64(n), resource.DecimalSI).String() }

// TestScaleRequestsDoNotGrowWithRanks: scaling a 100-rank job up or down reads the Job and the
// nodes (one page) and sends one patch, whatever the number of ranks: no request per pod.
func TestScaleRequestsDoNotGrowWithRanks(t *testing.T) {
	for _, tc := range []struct {
		from, to int32
		want     []string
	}{
		{100, 20, []string{"get jobs", "patch jobs"}},
		{20, 100, []string{"get jobs", "list nodes", "patch jobs"}},
	} {
		job := fixture.Job("ddp").Namespace("default").DefaultSelector().Indexed().Nodes(tc.from).Active(tc.from).
			Annotation(jobspec.NodesRangeAnnotation, "1:100").Container(gpuContainer(8)).Obj()
		c := fake.NewClientset(append(gpuNodes(100), job)...)
		if r := run(c, "ddp", "--nodes", itoa(tc.to)); r.Code != 0 {
			t.Fatalf("%d -> %d: exit %d: %s", tc.from, tc.to, r.Code, r.Stderr)
		}
		var got []string
		for _, a := range c.Actions() {
			got = append(got, a.GetVerb()+" "+a.GetResource().Resource)
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%d -> %d ranks: requests %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}
