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
	if got := holdersFrom(resp, "nvidia.com/gpu"); !reflect.DeepEqual(got, want) {
		t.Errorf("holdersFrom = %v, want %v", got, want)
	}
	// On a node of slices, only the slices' resource is mapped.
	want = map[string]gpustandin.Holder{"MIG-4": {Namespace: "team-a", Pod: "train-0", Container: "trainer"}}
	if got := holdersFrom(resp, "nvidia.com/mig-1g.10gb"); !reflect.DeepEqual(got, want) {
		t.Errorf("holdersFrom of the slices = %v, want %v", got, want)
	}
}

// The stand-in serves one collect until the next, as dcgm-exporter does: values written
// between two collects show from the next one on.
func TestServesLastCollect(t *testing.T) {
	dir := t.TempDir()
	devices, _, err := nodeDevices(gpustandin.NodeGPUs([]string{"GPU-1"}), "", 0)
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
	devices, resource, err := nodeDevices(gpustandin.NodeGPUs([]string{"GPU-00000001"}), "1g.10gb", 2)
	if err != nil {
		t.Fatal(err)
	}
	if resource != "nvidia.com/mig-1g.10gb" || len(devices) != 2 {
		t.Fatalf("resource %s, %d devices", resource, len(devices))
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
	if _, _, err := nodeDevices(gpustandin.NodeGPUs([]string{"GPU-1"}), "9g.99gb", 1); err == nil {
		t.Error("an unknown profile was cut")
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
