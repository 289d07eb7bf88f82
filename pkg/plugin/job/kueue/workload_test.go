package kueue

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
)

func parse(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestNeverFits(t *testing.T) {
	const oneFlavor = `
metadata: {name: gpu-cq}
spec:
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: cpu, nominalQuota: "1000"}
      - {name: nvidia.com/gpu, nominalQuota: "16"}
`
	const twoFlavors = `
metadata: {name: gpu-cq}
spec:
  resourceGroups:
  - flavors:
    - name: a100
      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: "16", borrowingLimit: "8"}]
`
	// One flavor per GPU product, the first without GPU quota: only the second admits GPU jobs.
	const byProduct = `
metadata: {name: by-product}
spec:
  resourceGroups:
  - flavors:
    - {name: h100, resources: [{name: nvidia.com/gpu, nominalQuota: "0"}]}
    - {name: a100, resources: [{name: nvidia.com/gpu, nominalQuota: "16"}]}
`
	const cohortUnlimited = `
metadata: {name: gpu-cq}
spec:
  cohortName: org
  resourceGroups:
  - flavors:
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: "16"}]
`
	const noGPU = `
metadata: {name: cpu-cq}
spec:
  resourceGroups:
  - flavors:
    - name: plain
      resources: [{name: cpu, nominalQuota: "16"}]
`
	tests := []struct {
		name string
		cq   string
		gpu  corev1.ResourceName // "" for whole GPUs
		gpus int64
		want string
	}{
		{"fits exactly", oneFlavor, "", 16, ""},
		{"over the quota", oneFlavor, "", 24, "needs 24 nvidia.com/gpu but ClusterQueue gpu-cq can hold at most 16"},
		{"no GPUs asked", oneFlavor, "", 0, ""},
		{"largest flavor with borrowing", twoFlavors, "", 24, ""},
		{"over every flavor", twoFlavors, "", 32, "can hold at most 24"},
		{"a later flavor holds it", byProduct, "", 16, ""},
		{"over the later flavor", byProduct, "", 24, "ClusterQueue by-product can hold at most 16"},
		{"cohort without a borrowing limit", cohortUnlimited, "", 64, ""},
		{"GPUs not covered", noGPU, "", 8, "which ClusterQueue cpu-cq does not cover"},
		{"slices within their quota", migAndWhole, "nvidia.com/mig-1g.10gb", 14, ""},
		{"slices over their quota, whole GPUs not counted", migAndWhole, "nvidia.com/mig-1g.10gb", 16, "needs 16 nvidia.com/mig-1g.10gb but ClusterQueue mixed-cq can hold at most 14"},
		{"a profile the queue does not cover", migAndWhole, "nvidia.com/mig-3g.40gb", 1, "needs 1 nvidia.com/mig-3g.40gb, which ClusterQueue mixed-cq does not cover"},
		{"whole GPUs do not count the slices", migAndWhole, "", 16, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gpu := tc.gpu
			if gpu == "" {
				gpu = jobspec.GPUResource
			}
			got := NeverFits(parse(t, tc.cq), gpu, tc.gpus)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("NeverFits = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestWorkloadFacts(t *testing.T) {
	wl := WorkloadFacts(parse(t, `
spec: {active: false}
status:
  conditions:
  - {type: QuotaReserved, status: "False", reason: Pending, message: "16 more needed"}
  - {type: Evicted, status: "True", reason: Preempted, message: "Preempted to accommodate a workload"}
  - {type: Admitted, status: "False", reason: NoReservation, message: "no reservation"}
`))
	want := jobstatus.Workload{Inactive: true, Pending: "16 more needed", EvictedReason: "Preempted", EvictedMessage: "Preempted to accommodate a workload"}
	if wl != want {
		t.Errorf("got %+v, want %+v", wl, want)
	}
	if wl := WorkloadFacts(parse(t, `
spec: {active: true}
status:
  conditions:
  - {type: QuotaReserved, status: "True", reason: QuotaReserved, message: "Quota reserved"}
  - {type: Evicted, status: "False", reason: Preempted, message: "old"}
`)); wl != (jobstatus.Workload{}) {
		t.Errorf("admitted Workload: got %+v, want nothing to report", wl)
	}
}
