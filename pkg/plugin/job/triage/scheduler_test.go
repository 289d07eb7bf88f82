package triage

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// TestUntoleratedTaintsFollowTheScheduler: a taint counts as tolerated exactly when the
// scheduler's rule (ToleratesTaint) says so, including the operators the old hand-written
// matcher read differently (an Equal toleration without a key, Gt on a numeric value).
func TestUntoleratedTaintsFollowTheScheduler(t *testing.T) {
	node := func(taints ...corev1.Taint) []corev1.Node {
		return []corev1.Node{fixture.Node("n").Taints(taints...).Val()}
	}
	pod := func(tols ...corev1.Toleration) *corev1.Pod {
		return fixture.Pod("").Toleration(tols...).Obj()
	}
	ml := corev1.Taint{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule}
	tier := corev1.Taint{Key: "tier", Value: "5", Effect: corev1.TaintEffectNoSchedule}
	soft := corev1.Taint{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule}
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		nodes []corev1.Node
		want  int
	}{
		{"no toleration", pod(), node(ml), 1},
		{"Equal with the value", pod(corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "ml"}), node(ml), 0},
		{"Equal with another value", pod(corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "cpu"}), node(ml), 1},
		{"Equal without a key matches on the value, as the scheduler does", pod(corev1.Toleration{Operator: corev1.TolerationOpEqual, Value: "ml"}), node(ml), 0},
		{"Exists without a key tolerates everything", pod(corev1.Toleration{Operator: corev1.TolerationOpExists}), node(ml, tier), 0},
		{"effect must match", pod(corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}), node(ml), 1},
		{"Gt below the taint's value tolerates", pod(corev1.Toleration{Key: "tier", Operator: corev1.TolerationOpGt, Value: "3"}), node(tier), 0},
		{"Gt above the taint's value does not", pod(corev1.Toleration{Key: "tier", Operator: corev1.TolerationOpGt, Value: "7"}), node(tier), 1},
		{"PreferNoSchedule never keeps a pod off", pod(), node(soft), 0},
		{"repeats once", pod(), node(ml, ml), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := untoleratedTaints(tc.pod, tc.nodes); len(got) != tc.want {
				t.Errorf("untolerated %v, want %d", got, tc.want)
			}
		})
	}
}

// A rank of MIG slices is judged by the nodes that have slices: a tainted whole-GPU node is
// none of its business, a tainted sliced node is.
func TestUntoleratedTaintsOfSlicedNodes(t *testing.T) {
	const slice = "nvidia.com/mig-1g.10gb"
	ml := corev1.Taint{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule}
	pod := fixture.Pod("").Container(corev1.Container{Name: "tao", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{slice: resource.MustParse("2")}}}).Obj()
	if got, n := podGPU(pod), gpuCount(pod); got != slice || n != 2 {
		t.Fatalf("podGPU, gpuCount = %s, %d; want %s, 2", got, n, slice)
	}
	whole := fixture.Node("whole").GPUs(8).Taints(ml).Val()
	if got := untoleratedTaints(pod, []corev1.Node{whole}); len(got) != 0 {
		t.Errorf("a whole-GPU node's taint counted for a rank of slices: %v", got)
	}
	sliced := fixture.Node("sliced").Allocatable(slice, "7").Taints(ml).Val()
	if got := untoleratedTaints(pod, []corev1.Node{whole, sliced}); len(got) != 1 {
		t.Errorf("the sliced node's taint: got %v", got)
	}
}

func TestGPUCount(t *testing.T) {
	gpus := func(limit, request string) *corev1.Pod {
		c := corev1.Container{Name: "tao", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{}}}
		if limit != "" {
			c.Resources.Limits[jobspec.GPUResource] = resource.MustParse(limit)
		}
		if request != "" {
			c.Resources.Requests[jobspec.GPUResource] = resource.MustParse(request)
		}
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
	}
	for _, tc := range []struct {
		pod  *corev1.Pod
		n    int64
		text string
	}{
		{gpus("", ""), 0, "enough"},
		{gpus("8", ""), 8, "8"},
		{gpus("", "2"), 2, "2"},
		{gpus("4", "2"), 4, "4"},
		{gpus("0", ""), 0, "enough"},
	} {
		if n, text := gpuCount(tc.pod), gpuRequest(tc.pod); n != tc.n || text != tc.text {
			t.Errorf("gpuCount %d %q, want %d %q", n, text, tc.n, tc.text)
		}
	}
}

func TestTolerationFlag(t *testing.T) {
	for _, tc := range []struct {
		taint corev1.Taint
		want  string
	}{
		{corev1.Taint{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoExecute}, "--toleration dedicated=ml:NoExecute"},
		{corev1.Taint{Key: string(jobspec.GPUResource), Effect: corev1.TaintEffectNoSchedule}, "--toleration nvidia.com/gpu:NoSchedule"},
	} {
		if got := tolerationFlag(tc.taint); got != tc.want {
			t.Errorf("tolerationFlag = %q, want %q", got, tc.want)
		}
	}
}
