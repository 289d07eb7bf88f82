package gpufit

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
)

// TestRequestForJobIsTheSpecsRequest: scale judges a Job made by submit as submit judged its
// spec (the /dev/shm counted as memory, the stager init container, the GPU resource).
func TestRequestForJobIsTheSpecsRequest(t *testing.T) {
	for name, s := range map[string]jobspec.Spec{
		"multi-node default shm": {Name: "a", Namespace: "ml", Image: "i", Command: []string{"x"}, GPUs: 8, Nodes: 3, MasterPort: 29500},
		"memory above shm":       {Name: "b", Namespace: "ml", Image: "i", Command: []string{"x"}, GPUs: 2, Nodes: 2, MasterPort: 29500, Memory: "64Gi", CPU: "8"},
		"MIG slices":             {Name: "c", Namespace: "ml", Image: "i", Command: []string{"x"}, GPUs: 1, Nodes: 2, MasterPort: 29500, GPUResourceName: "nvidia.com/mig-1g.10gb", ShmSize: "1Gi"},
	} {
		want := RequestFor(&s)
		got := RequestForJob(jobspec.Build(s).Job, s.Nodes)
		if !equality.Semantic.DeepEqual(got.PerPod, want.PerPod) || got.GPU != want.GPU || got.Pods != want.Pods || got.Selector.String() != want.Selector.String() {
			t.Errorf("%s: from the Job %+v, from the spec %+v", name, got, want)
		}
	}
}
