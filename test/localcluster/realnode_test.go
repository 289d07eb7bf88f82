package localcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kubectl-tao/kubectl-tao/hack/release"
	"github.com/kubectl-tao/kubectl-tao/test/localcluster/gpustandin"
)

func TestParseRealNodeMode(t *testing.T) {
	for in, want := range map[string]RealNodeMode{"": RealNodeOff, "0": RealNodeOff, "false": RealNodeOff, "1": RealNodeOn, "true": RealNodeOn, "auto": RealNodeAuto, "AUTO": RealNodeAuto} {
		got, err := ParseRealNodeMode(in)
		if err != nil || got != want {
			t.Errorf("ParseRealNodeMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseRealNodeMode("sometimes"); err == nil || !strings.Contains(err.Error(), "1, 0, auto") {
		t.Errorf("bad value: err = %v, want one naming the choices", err)
	}
}

func TestPlanRealNodeNamesPerStateDir(t *testing.T) {
	a, err := PlanRealNode("/work/a/.cluster", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := PlanRealNode("/work/b/.cluster", nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Name == b.Name || a.Bridge == b.Bridge || a.CgroupRoot == b.CgroupRoot || a.Network == b.Network {
		t.Errorf("two state dirs share names: %+v / %+v", a, b)
	}
	if len(a.Bridge) > 15 {
		t.Errorf("bridge name %q longer than an interface name may be", a.Bridge)
	}
	again, _ := PlanRealNode("/work/a/.cluster", nil)
	if !reflect.DeepEqual(a, again) {
		t.Errorf("the plan is not stable: %+v vs %+v", a, again)
	}
	if a.Dir != "/work/a/.cluster/node" || !strings.HasPrefix(a.Gateway, "10.244.") || !strings.HasSuffix(a.Gateway, ".1") {
		t.Errorf("dir %s, gateway %s", a.Dir, a.Gateway)
	}
	// A subnet already on an interface is skipped.
	_, used, _ := net.ParseCIDR(a.Subnet)
	moved, err := PlanRealNode("/work/a/.cluster", []*net.IPNet{used})
	if err != nil {
		t.Fatal(err)
	}
	if moved.Subnet == a.Subnet {
		t.Errorf("subnet %s chosen although in use", moved.Subnet)
	}
	// A machine using all of 10.244.0.0/16 leaves none.
	_, all, _ := net.ParseCIDR("10.244.0.0/16")
	if _, err := PlanRealNode("/work/a/.cluster", []*net.IPNet{all}); err == nil {
		t.Error("no error when 10.244.0.0/16 is taken")
	}
}

func TestRuncBundle(t *testing.T) {
	for _, tc := range []struct {
		args        []string
		sub, bundle string
	}{
		{[]string{"--root", "/r", "--log", "/l.json", "--log-format", "json", "create", "--bundle", "/b", "--pid-file", "/p", "id"}, "create", "/b"},
		{[]string{"run", "-b", "/b2", "id"}, "run", "/b2"},
		{[]string{"create", "--bundle=/b3", "id"}, "create", "/b3"},
		{[]string{"create", "id"}, "create", ""},
		{[]string{"--root", "/r", "start", "id"}, "start", ""},
		{[]string{"--root", "create", "state", "id"}, "state", ""},
	} {
		sub, bundle := RuncBundle(tc.args)
		if sub != tc.sub || bundle != tc.bundle {
			t.Errorf("RuncBundle(%q) = %q, %q; want %q, %q", tc.args, sub, bundle, tc.sub, tc.bundle)
		}
	}
}

func TestDropSeccomp(t *testing.T) {
	in := []byte(`{"ociVersion":"1.2.0","linux":{"resources":{"memory":{"limit":18446744073709551615}},"seccomp":{"defaultAction":"SCMP_ACT_ERRNO"}},"process":{"args":["sh"]}}`)
	out, changed, err := DropSeccomp(in)
	if err != nil || !changed {
		t.Fatalf("changed %v, err %v", changed, err)
	}
	if bytes.Contains(out, []byte("seccomp")) {
		t.Errorf("seccomp still there: %s", out)
	}
	// A 64-bit limit must survive exactly (a float64 would round it).
	if !bytes.Contains(out, []byte("18446744073709551615")) {
		t.Errorf("memory limit changed: %s", out)
	}
	var spec map[string]any
	if err := json.Unmarshal(out, &spec); err != nil || spec["process"] == nil {
		t.Errorf("output lost the rest: %s (%v)", out, err)
	}
	same, changed, err := DropSeccomp([]byte(`{"linux":{}}`))
	if err != nil || changed || string(same) != `{"linux":{}}` {
		t.Errorf("no seccomp: %s, %v, %v", same, changed, err)
	}
	if _, _, err := DropSeccomp([]byte("{")); err == nil {
		t.Error("no error for a broken config.json")
	}
}

func TestAllocateResponseLikeNVIDIA(t *testing.T) {
	resp := AllocateResponse(&pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"GPU-a", "GPU-b"}}, {DevicesIds: []string{"GPU-c"}},
	}})
	if len(resp.ContainerResponses) != 2 {
		t.Fatalf("%d responses, want one per container", len(resp.ContainerResponses))
	}
	if got := resp.ContainerResponses[0].Envs["NVIDIA_VISIBLE_DEVICES"]; got != "GPU-a,GPU-b" {
		t.Errorf("first container NVIDIA_VISIBLE_DEVICES=%q", got)
	}
	if got := resp.ContainerResponses[1].Envs["NVIDIA_VISIBLE_DEVICES"]; got != "GPU-c" {
		t.Errorf("second container NVIDIA_VISIBLE_DEVICES=%q", got)
	}
	ids := GPUDeviceIDs("/x/.cluster", 8)
	seen := map[string]bool{}
	for _, id := range ids {
		if !strings.HasPrefix(id, "GPU-") || seen[id] {
			t.Errorf("device id %q not unique or not GPU-shaped", id)
		}
		seen[id] = true
	}
	if other := GPUDeviceIDs("/y/.cluster", 8); other[0] == ids[0] {
		t.Error("two nodes share device IDs")
	}
}

// A node configured with slices advertises its whole GPUs and, as a resource of its own, the
// slices of one more GPU by their MIG UUIDs, the IDs the exporter stand-in maps to pods; without,
// its whole GPUs alone.
func TestDevicePluginDevices(t *testing.T) {
	got, err := DevicePluginDevices("/x/.cluster", 2, 0)
	if err != nil || !reflect.DeepEqual(got, []PluginResource{{Name: GPUResource, IDs: GPUDeviceIDs("/x/.cluster", 2)}}) {
		t.Errorf("whole GPUs: %v %v", got, err)
	}
	got, err = DevicePluginDevices("/x/.cluster", 2, 3)
	if err != nil || len(got) != 2 || got[0].Name != GPUResource || !reflect.DeepEqual(got[0].IDs, GPUDeviceIDs("/x/.cluster", 2)) ||
		got[1].Name != MIGResource || len(got[1].IDs) != 3 {
		t.Fatalf("whole GPUs and slices: %v %v", got, err)
	}
	migGPU := MIGGPUID("/x/.cluster", 2)
	if migGPU != GPUDeviceIDs("/x/.cluster", 3)[2] {
		t.Errorf("the GPU in MIG mode %s is not the one after the whole ones", migGPU)
	}
	seen := map[string]bool{}
	for k, id := range got[1].IDs {
		if id != gpustandin.MIGDeviceID(migGPU, 7+k) || seen[id] {
			t.Errorf("slice %d: id %q, want the MIG UUID of instance %d of %s", k, id, 7+k, migGPU)
		}
		seen[id] = true
	}
	if _, err := DevicePluginDevices("/x/.cluster", 1, MIGSlicesPerGPU+1); err == nil {
		t.Error("a GPU cut into more slices than its profile has")
	}
}

// The exporter serves what the device plugin advertises: the same GPUs in the same order, the
// one after the whole GPUs in MIG mode; a node without slices gets the flags it always had.
func TestGPUExporterArgs(t *testing.T) {
	info, err := PlanRealNode("/s/.cluster", nil)
	if err != nil {
		t.Fatal(err)
	}
	whole := "--gpus=" + strings.Join(GPUDeviceIDs(info.StateDir, RealNodeGPUs), ",")
	if got := gpuExporterArgs(info); !reflect.DeepEqual(got, []string{whole, "--values-dir=" + gpuExporterValuesMount}) {
		t.Errorf("whole GPUs: %q", got)
	}
	info.MIGSlices = 2
	want := []string{"--gpus=" + strings.Join(GPUDeviceIDs(info.StateDir, RealNodeGPUs+1), ","), "--mig-gpus=" + MIGGPUID(info.StateDir, RealNodeGPUs),
		"--mig-profile=1g.10gb", "--mig-slices=2", "--values-dir=" + gpuExporterValuesMount}
	if got := gpuExporterArgs(info); !reflect.DeepEqual(got, want) {
		t.Errorf("with slices: %q, want %q", got, want)
	}
}

// up waits until the node's allocatable has every resource its plugin advertises, in full.
func TestRealNodeAdvertises(t *testing.T) {
	node := func(res map[corev1.ResourceName]int64) *corev1.Node {
		n := &corev1.Node{Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{}}}
		for name, v := range res {
			n.Status.Allocatable[name] = *resource.NewQuantity(v, resource.DecimalSI)
		}
		return n
	}
	whole := RealNodeInfo{GPUs: 8}
	mixed := RealNodeInfo{GPUs: 8, MIGSlices: 2}
	for _, c := range []struct {
		info RealNodeInfo
		node *corev1.Node
		want bool
	}{
		{whole, node(map[corev1.ResourceName]int64{GPUResource: 8}), true},
		{whole, node(map[corev1.ResourceName]int64{GPUResource: 7}), false},
		{mixed, node(map[corev1.ResourceName]int64{GPUResource: 8}), false},
		{mixed, node(map[corev1.ResourceName]int64{MIGResource: 2}), false},
		{mixed, node(map[corev1.ResourceName]int64{GPUResource: 8, MIGResource: 2}), true},
	} {
		if got := c.info.advertises(c.node); got != c.want {
			t.Errorf("%s on a node of %v: %v, want %v", c.info.gpuSummary(), c.node.Status.Allocatable, got, c.want)
		}
	}
}

func TestParseLdd(t *testing.T) {
	out := "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibtinfo.so.6 => /lib/x86_64-linux-gnu/libtinfo.so.6 (0x00007f)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n"
	want := []string{"/lib/x86_64-linux-gnu/libtinfo.so.6", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if got := ParseLdd(out); !reflect.DeepEqual(got, want) {
		t.Errorf("ParseLdd = %q, want %q", got, want)
	}
}

func TestNodeLabelsCarryGFDAndOwnLabel(t *testing.T) {
	flag := nodeLabelsFlag(8, 0)
	for _, want := range []string{RealNodeLabel + "=true", "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count=8", "nvidia.com/mig.strategy=single"} {
		if !strings.Contains(flag, want) {
			t.Errorf("--node-labels lacks %s: %s", want, flag)
		}
	}
	// With a GPU in MIG mode GFD counts it too and says the strategy is mixed.
	mixed := nodeLabelsFlag(8, 2)
	for _, want := range []string{"nvidia.com/gpu.count=9", "nvidia.com/mig.strategy=mixed"} {
		if !strings.Contains(mixed, want) {
			t.Errorf("--node-labels with slices lacks %s: %s", want, mixed)
		}
	}
	if strings.Contains(flag, NodeTypeLabel+"="+NodeTypeKwok) {
		t.Error("the real node must not be counted as a simulated node")
	}
}

func TestRealNodeConfigsStayOffTheMachinesNetwork(t *testing.T) {
	info, err := PlanRealNode("/s/.cluster", nil)
	if err != nil {
		t.Fatal(err)
	}
	info.KubeletPort, info.HealthzPort, info.DNSHealth, info.DNSReady = 10250, 10248, 8080, 8181
	kc := kubeletConfig(&info, "/s/.cluster/pki")
	for _, want := range []string{"address: " + info.Gateway, "healthzBindAddress: 127.0.0.1", "clusterDNS: [" + info.Gateway + "]", "cgroupRoot: " + info.CgroupRoot, "key: " + RealNodeLabel} {
		if !strings.Contains(kc, want) {
			t.Errorf("kubelet config lacks %q:\n%s", want, kc)
		}
	}
	cf := corefile(&info, "/s/.cluster/kubeconfig")
	if strings.Count(cf, "bind "+info.Gateway) != 2 || strings.Contains(cf, "forward") {
		t.Errorf("CoreDNS must bind the bridge address in every block and forward nowhere:\n%s", cf)
	}
	cc := containerdConfig(&info, map[string]string{CompCNIBridge: "/cache/cni/bridge"})
	for _, want := range []string{`stream_server_address = "127.0.0.1"`, "netns_mounts_under_state_dir = true", `sandbox = "` + PauseImageRef + `"`} {
		if !strings.Contains(cc, want) {
			t.Errorf("containerd config lacks %q", want)
		}
	}
}

func TestWriteRealNodeEnv(t *testing.T) {
	dir := t.TempDir()
	if err := writeRealNodeEnv(dir, nil, "the real node needs root (it's so)"); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, RealNodeEnvFile))
	if got := envValue(string(data), "TAO_REAL_NODE_SKIP"); got != "the real node needs root (it's so)" {
		t.Errorf("skip reason read back as %q from\n%s", got, data)
	}
	if got := envValue(string(data), "TAO_REAL_NODE"); got != "" {
		t.Errorf("TAO_REAL_NODE=%q without a node", got)
	}
	info, _ := PlanRealNode(dir, nil)
	info.Images[ImageTest] = TestImageRef
	info.Images[ImageOpenMPI] = OpenMPIImageRef
	info.Images[ImageMPICH] = MPICHImageRef
	info.Images[ImageOpenMPISSH] = OpenMPISSHImageRef
	info.ImagesUnavailable = map[string]string{ImageTorch: "python3-torch is not installed on this host (no `x`)"}
	if err := writeRealNodeEnv(dir, &info, ""); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(filepath.Join(dir, RealNodeEnvFile))
	if envValue(string(data), "TAO_TORCH_IMAGE") != "" || envValue(string(data), "TAO_TORCH_IMAGE_SKIP") != info.ImagesUnavailable[ImageTorch] {
		t.Errorf("an unavailable torch image must leave TAO_TORCH_IMAGE empty and say why in TAO_TORCH_IMAGE_SKIP:\n%s", data)
	}
	if envValue(string(data), "TAO_OPENMPI_IMAGE") != "local/openmpi:1" || envValue(string(data), "TAO_OPENMPI_IMAGE_SKIP") != "" {
		t.Errorf("an imported OpenMPI image must be in TAO_OPENMPI_IMAGE, with no TAO_OPENMPI_IMAGE_SKIP:\n%s", data)
	}
	delete(info.Images, ImageOpenMPI)
	info.ImagesUnavailable[ImageOpenMPI] = "openmpi-bin python3-mpi4py is not installed on this host (no `y`)"
	if err := writeRealNodeEnv(dir, &info, ""); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(filepath.Join(dir, RealNodeEnvFile))
	if envValue(string(data), "TAO_OPENMPI_IMAGE") != "" || envValue(string(data), "TAO_OPENMPI_IMAGE_SKIP") != info.ImagesUnavailable[ImageOpenMPI] {
		t.Errorf("an unavailable OpenMPI image must leave TAO_OPENMPI_IMAGE empty and say why in TAO_OPENMPI_IMAGE_SKIP:\n%s", data)
	}
	if envValue(string(data), "TAO_MPICH_IMAGE") != "local/mpich:1" || envValue(string(data), "TAO_MPICH_IMAGE_SKIP") != "" {
		t.Errorf("an imported MPICH image must be in TAO_MPICH_IMAGE:\n%s", data)
	}
	if envValue(string(data), "TAO_OPENMPI_SSH_IMAGE") != "local/openmpi-ssh:1" || envValue(string(data), "TAO_OPENMPI_SSH_IMAGE_SKIP") != "" {
		t.Errorf("an imported OpenMPI image with ssh must be in TAO_OPENMPI_SSH_IMAGE:\n%s", data)
	}
	if envValue(string(data), "TAO_REAL_NODE") != info.Name || envValue(string(data), "TAO_TEST_IMAGE") != "local/tao-test:1" || envValue(string(data), "TAO_REAL_NODE_IP") != info.Gateway ||
		envValue(string(data), "TAO_REAL_NODE_MIG_SLICES") != "0" {
		t.Errorf("env file:\n%s", data)
	}
	env, err := TestEnv(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"KUBECONFIG=" + KubeconfigPath(dir): true, "TAO_REAL_NODE=" + info.Name: true, "TAO_REAL_NODE_SKIP=": true, "TAO_SH_ONLY_IMAGE=": true}
	for _, kv := range env {
		delete(want, kv)
	}
	if len(want) > 0 {
		t.Errorf("TestEnv lacks %v: %q", want, env)
	}
	if _, err := TestEnv(t.TempDir()); err == nil {
		t.Error("TestEnv of a state dir without realnode.env: no error")
	}
}

func TestNodeImagesAreReproducible(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the images copy Linux host binaries found with ldd")
	}
	src, err := FindSourceDir(".")
	if err != nil {
		t.Fatal(err)
	}
	roles := []string{ImageTest, ImageShOnly, ImagePause, ImageDCGM}
	torchMissing := TorchUnavailable("/")
	if torchMissing == "" {
		roles = append(roles, ImageTorch)
	}
	openMPIMissing := OpenMPIUnavailable("/")
	if openMPIMissing == "" {
		roles = append(roles, ImageOpenMPI)
	}
	if MPICHUnavailable("/") == "" {
		roles = append(roles, ImageMPICH)
	}
	if OpenMPISSHUnavailable("/") == "" {
		roles = append(roles, ImageOpenMPISSH)
	}
	// Digests, not the bytes: the torch image is hundreds of MB.
	var arch [2]map[string]string
	for i := range arch {
		imgs, err := BuildNodeImages(context.Background(), src, t.TempDir(), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if torchMissing != "" && imgs[ImageTorch].Unavailable != torchMissing {
			t.Errorf("without python3-torch the torch image must say why: %+v", imgs[ImageTorch])
		}
		if openMPIMissing != "" && imgs[ImageOpenMPI].Unavailable != openMPIMissing {
			t.Errorf("without OpenMPI and mpi4py the OpenMPI image must say why: %+v", imgs[ImageOpenMPI])
		}
		arch[i] = map[string]string{}
		for _, role := range roles {
			if arch[i][role], err = release.SHA256File(imgs[role].Archive); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, role := range roles {
		if arch[0][role] != arch[1][role] {
			t.Errorf("%s image differs between two builds", role)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/work/a b/.cluster/node`:    `/work/a b/.cluster/node`,
		`/work/a\040b/.cluster/node`: `/work/a b/.cluster/node`,
		`/x\011tab\134back`:          "/x\ttab\\back",
		`/plain`:                     `/plain`,
		`/trailing\04`:               `/trailing\04`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}
