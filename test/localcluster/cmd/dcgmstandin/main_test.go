package main

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kubectl-tao/kubectl-tao/test/localcluster/gpustandin"
)

func TestHoldersFrom(t *testing.T) {
	resp := &podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{
		{Name: "train-0", Namespace: "team-a", Containers: []*podresourcesapi.ContainerResources{
			{Name: "trainer", Devices: []*podresourcesapi.ContainerDevices{
				{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-1", "GPU-2"}},
				{ResourceName: "example.com/nic", DeviceIds: []string{"GPU-3"}},
				{ResourceName: "nvidia.com/mig-1g.10gb", DeviceIds: []string{"MIG-4"}},
			}},
			{Name: "sidecar"},
		}},
		{Name: "idle", Namespace: "default", Containers: []*podresourcesapi.ContainerResources{{Name: "c"}}},
	}}
	want := map[string]gpustandin.Holder{
		"GPU-1": {Namespace: "team-a", Pod: "train-0", Container: "trainer"},
		"GPU-2": {Namespace: "team-a", Pod: "train-0", Container: "trainer"},
	}
	if got := holdersFrom(resp, []string{"nvidia.com/gpu"}); !reflect.DeepEqual(got, want) {
		t.Errorf("holdersFrom = %v, want %v", got, want)
	}
	// On a node of slices, only the slices' resource is mapped.
	want = map[string]gpustandin.Holder{"MIG-4": {Namespace: "team-a", Pod: "train-0", Container: "trainer"}}
	if got := holdersFrom(resp, []string{"nvidia.com/mig-1g.10gb"}); !reflect.DeepEqual(got, want) {
		t.Errorf("holdersFrom of the slices = %v, want %v", got, want)
	}
	// On a node of the mixed strategy, both.
	want["GPU-1"] = gpustandin.Holder{Namespace: "team-a", Pod: "train-0", Container: "trainer"}
	want["GPU-2"] = want["GPU-1"]
	if got := holdersFrom(resp, []string{"nvidia.com/gpu", "nvidia.com/mig-1g.10gb"}); !reflect.DeepEqual(got, want) {
		t.Errorf("holdersFrom of whole GPUs and slices = %v, want %v", got, want)
	}
}

// The stand-in serves one collect until the next, as dcgm-exporter does: values written
// between two collects show from the next one on.
func TestServesLastCollect(t *testing.T) {
	dir := t.TempDir()
	devices, _, err := nodeDevices(gpustandin.NodeGPUs([]string{"GPU-1"}), nil, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	e := &exporter{devices: devices, valuesDir: dir, hostname: "node",
		holders: func(context.Context) (map[string]gpustandin.Holder, error) {
			return map[string]gpustandin.Holder{"GPU-1": {Namespace: "ns", Pod: "p", Container: "c"}}, nil
		}}
	scrape := func() string {
		rec := httptest.NewRecorder()
		e.metrics(rec, httptest.NewRequest("GET", "/metrics", nil))
		for _, l := range strings.Split(rec.Body.String(), "\n") {
			if strings.HasPrefix(l, "DCGM_FI_DEV_GPU_UTIL{") {
				return l[strings.LastIndex(l, " ")+1:]
			}
		}
		t.Fatalf("no GPU_UTIL series in\n%s", rec.Body.String())
		return ""
	}
	e.collect(context.Background())
	if got := scrape(); got != "0" {
		t.Fatalf("before any values: util %s", got)
	}
	if err := os.MkdirAll(filepath.Join(dir, "ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ns", "p"), gpustandin.Values{Util: 97}.Format(), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := scrape(); got != "0" {
		t.Errorf("a scrape before the next collect: util %s, want the last collect's 0", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.run(ctx, 20*time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for scrape() != "97" {
		if time.Now().After(deadline) {
			t.Fatalf("util still %s 5s after the values changed, collecting every 20ms", scrape())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A node cut into slices serves each slice the kubelet gave a pod with the pod's values as
// engine activity and memory, and no GPU_UTIL.
func TestCollectMIGSlices(t *testing.T) {
	devices, resources, err := nodeDevices(gpustandin.NodeGPUs([]string{"GPU-00000001"}), nil, "1g.10gb", 2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(resources, []string{"nvidia.com/mig-1g.10gb"}) || len(devices) != 2 {
		t.Fatalf("resources %v, %d devices", resources, len(devices))
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "ns"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ns", "p"), gpustandin.Values{Util: 64, MemUsedMiB: 2000}.Format(), 0o644); err != nil {
		t.Fatal(err)
	}
	held := devices[1].id
	e := &exporter{devices: devices, valuesDir: dir, hostname: "node",
		holders: func(context.Context) (map[string]gpustandin.Holder, error) {
			return map[string]gpustandin.Holder{held: {Namespace: "ns", Pod: "p", Container: "c"}}, nil
		}}
	e.collect(context.Background())
	rec := httptest.NewRecorder()
	e.metrics(rec, httptest.NewRequest("GET", "/metrics", nil))
	page := rec.Body.String()
	for _, want := range []string{
		`DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-00000001",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="1g.10gb",GPU_I_ID="8",Hostname="node",DCGM_FI_DRIVER_VERSION="580.95.05",container="c",namespace="ns",pod="p"} 0.640000`,
		`DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-00000001",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="1g.10gb",GPU_I_ID="8",Hostname="node",DCGM_FI_DRIVER_VERSION="580.95.05",container="c",namespace="ns",pod="p"} 2000`,
		`GPU_I_ID="7",Hostname="node",DCGM_FI_DRIVER_VERSION="580.95.05"} 0.000000`,
	} {
		if !strings.Contains(page, want+"\n") {
			t.Errorf("no line\n%s\nin\n%s", want, page)
		}
	}
	if strings.Contains(page, "DCGM_FI_DEV_GPU_UTIL") {
		t.Errorf("slices with GPU_UTIL:\n%s", page)
	}
	if _, _, err := nodeDevices(gpustandin.NodeGPUs([]string{"GPU-1"}), nil, "9g.99gb", 1); err == nil {
		t.Error("an unknown profile was cut")
	}
}

// A node of the mixed strategy: the GPUs of --mig-gpus are cut into slices, the others stay
// whole with their GPU_UTIL, and the devices of both resources are mapped to their pods.
func TestCollectMixedNode(t *testing.T) {
	gpus := gpustandin.NodeGPUs([]string{"GPU-0", "GPU-1", "GPU-2"})
	devices, resources, err := nodeDevices(gpus, []string{"GPU-2"}, "1g.10gb", 2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(resources, []string{"nvidia.com/gpu", "nvidia.com/mig-1g.10gb"}) || len(devices) != 4 {
		t.Fatalf("resources %v, %d devices", resources, len(devices))
	}
	if devices[0].id != "GPU-0" || devices[1].id != "GPU-1" || devices[2].state.Slice == nil || devices[2].state.Index != 2 ||
		devices[2].id != gpustandin.MIGDeviceID("GPU-2", 7) {
		t.Fatalf("devices %+v", devices)
	}
	e := &exporter{devices: devices, valuesDir: t.TempDir(), hostname: "node",
		holders: func(context.Context) (map[string]gpustandin.Holder, error) {
			return map[string]gpustandin.Holder{
				"GPU-1":                            {Namespace: "ns", Pod: "whole", Container: "c"},
				gpustandin.MIGDeviceID("GPU-2", 8): {Namespace: "ns", Pod: "slice", Container: "c"},
			}, nil
		}}
	e.collect(context.Background())
	rec := httptest.NewRecorder()
	e.metrics(rec, httptest.NewRequest("GET", "/metrics", nil))
	page := rec.Body.String()
	for _, want := range []string{
		`DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-1",`,
		`,container="c",namespace="ns",pod="whole"} 0` + "\n",
		`DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="2",UUID="GPU-2",pci_bus_id="00000000:3A:00.0",device="nvidia2",modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="1g.10gb",GPU_I_ID="8",Hostname="node",DCGM_FI_DRIVER_VERSION="580.95.05",container="c",namespace="ns",pod="slice"} 0.000000` + "\n",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("no %q in\n%s", want, page)
		}
	}
	if strings.Contains(page, `DCGM_FI_DEV_GPU_UTIL{gpu="2"`) {
		t.Errorf("the GPU in MIG mode has a GPU_UTIL:\n%s", page)
	}
	if _, _, err := nodeDevices(gpus, []string{"GPU-9"}, "1g.10gb", 2); err == nil {
		t.Error("--mig-gpus naming no GPU of the node was taken")
	}
}

func TestCollectInterval(t *testing.T) {
	for _, tc := range []struct {
		flag    int
		env     string
		flagSet bool
		want    time.Duration
		err     bool
	}{
		{30000, "", false, 30 * time.Second, false},
		{30000, "1000", false, time.Second, false},
		{500, "1000", true, 500 * time.Millisecond, false},
		{30000, "soon", false, 0, true},
		{0, "", true, 0, true},
	} {
		got, err := collectInterval(tc.flag, tc.env, tc.flagSet)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%+v: %s, %v", tc, got, err)
		}
	}
}
