package main

import (
	"reflect"
	"testing"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kubectl-tao/kubectl-tao/test/localcluster/gpustandin"
)

func TestHoldersFrom(t *testing.T) {
	resp := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
		{Name: "train-0", Namespace: "team-a", Containers: []*podresourcesapi.ContainerResources{
			{Name: "trainer", Devices: []*podresourcesapi.ContainerDevices{
				{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-1", "GPU-2"}},
				{ResourceName: "example.com/nic", DeviceIds: []string{"GPU-3"}},
			}},
			{Name: "sidecar"},
		}},
		{Name: "idle", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{{Name: "c"}}},
	}}
	want := map[string]gpustandin.Holder{
		"GPU-1": {Namespace: "team-a", Pod: "train-0", Container: "trainer"},
		"GPU-2": {Namespace: "team-a", Pod: "train-0", Container: "trainer"},
	}
	if got := holdersFrom(resp); !reflect.DeepEqual(got, want) {
		t.Errorf("holdersFrom = %v, want %v", got, want)
	}
}
