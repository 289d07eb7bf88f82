package jobstatus

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// gpus is the container of a Job asking for GPUs by limit and by request ("" for none).
func gpus(limit, request string) corev1.Container {
	c := corev1.Container{Name: "tao", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{}}}
	if limit != "" {
		c.Resources.Limits[jobspec.GPUResource] = resource.MustParse(limit)
	}
	if request != "" {
		c.Resources.Requests[jobspec.GPUResource] = resource.MustParse(request)
	}
	return c
}

// migSlices is the container of a Job asking for n MIG slices of 1g.10gb by limit.
func migSlices(n string) corev1.Container { return withSlices(gpus("", ""), n) }

func withSlices(c corev1.Container, n string) corev1.Container {
	c.Resources.Limits["nvidia.com/mig-1g.10gb"] = resource.MustParse(n)
	return c
}

func TestGPUFacts(t *testing.T) {
	tests := []struct {
		name  string
		job   *batchv1.Job
		gpus  int64
		nodes int32
		shape string
	}{
		{"limit, multi-node", fixture.Job("train").Nodes(2).Container(gpus("8", "")).Obj(), 8, 2, "8x2"},
		{"request only", fixture.Job("train").Nodes(1).Container(gpus("", "4")).Obj(), 4, 1, "4x1"},
		{"limit wins over request", fixture.Job("train").Nodes(4).Container(gpus("2", "1")).Obj(), 2, 4, "2x4"},
		{"no gpus", fixture.Job("train").Nodes(3).Container(gpus("", "")).Obj(), 0, 3, "0"},
		{"no containers", fixture.Job("train").Nodes(1).Obj(), 0, 1, "0"},
		{"MIG slices by limit", fixture.Job("train").Nodes(2).Annotation(jobspec.GPUResourceAnnotation, "nvidia.com/mig-1g.10gb").Container(migSlices("2")).Obj(), 2, 2, "2x2"},
		// A Job of slices does not count a whole GPU it also asks for (--resource by hand), nor
		// a Job of whole GPUs the slices.
		{"MIG slices beside a whole GPU", fixture.Job("train").Nodes(1).Annotation(jobspec.GPUResourceAnnotation, "nvidia.com/mig-1g.10gb").Container(withSlices(gpus("1", ""), "3")).Obj(), 3, 1, "3x1"},
		{"whole GPUs beside slices", fixture.Job("train").Nodes(1).Container(withSlices(gpus("1", ""), "3")).Obj(), 1, 1, "1x1"},
		{"slices without the annotation", fixture.Job("train").Nodes(1).Container(migSlices("2")).Obj(), 0, 1, "0"},
		{"parallelism only", &batchv1.Job{Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](5)}}, 0, 5, "0"},
		{"neither completions nor parallelism", &batchv1.Job{}, 0, 1, "0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if g, n, s := GPUsPerNode(tc.job), Nodes(tc.job), GPUShape(tc.job); g != tc.gpus || n != tc.nodes || s != tc.shape {
				t.Errorf("got gpus %d nodes %d shape %q; want %d %d %q", g, n, s, tc.gpus, tc.nodes, tc.shape)
			}
		})
	}
}

func TestGang(t *testing.T) {
	if got := Gang(1); got != "its one rank" {
		t.Errorf("Gang(1) = %q", got)
	}
	if got := Gang(int32(4)); got != "all 4 ranks together" {
		t.Errorf("Gang(4) = %q", got)
	}
}
