//go:build e2e

package localcluster

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// hostSnapshot is what a real node may change on the host and down must restore.
type hostSnapshot struct {
	Interfaces    []string
	Netns         []string
	ShimSockets   []string
	Sysctls       map[string]string
	FixedPaths    map[string]bool
	TopCgroups    []string
	MachineRecord bool
}

func snapshotHost(t *testing.T) hostSnapshot {
	t.Helper()
	s := hostSnapshot{Sysctls: map[string]string{}, FixedPaths: map[string]bool{}}
	if ifs, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, e := range ifs {
			s.Interfaces = append(s.Interfaces, e.Name())
		}
	}
	s.Netns = dirNames("/run/netns")
	s.ShimSockets = dirNames("/run/containerd/s")
	for _, k := range nodeSysctls {
		s.Sysctls[k], _ = readSysctl(k)
	}
	for _, p := range fixedHostPaths {
		_, err := os.Stat(p)
		s.FixedPaths[p] = err == nil
	}
	for _, h := range dirNames("/sys/fs/cgroup") {
		for _, n := range dirNames(filepath.Join("/sys/fs/cgroup", h)) {
			if strings.HasPrefix(n, "tao-") {
				s.TopCgroups = append(s.TopCgroups, h+"/"+n)
			}
		}
	}
	_, err := os.Stat(machineRecordFile)
	s.MachineRecord = err == nil
	return s
}

func dirNames(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// testCluster is the configuration of a cluster in a temp dir, with the test binary as its
// helpers (see TestMain).
func testCluster(t *testing.T, nodes int, mode RealNodeMode, wait time.Duration) Config {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	src, err := FindSourceDir(wd)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		StateDir: filepath.Join(t.TempDir(), "c"), SourceDir: src, Nodes: nodes, GPUsPerNode: 8,
		SelfExe: self, Progress: testWriter{t}, RealNode: mode, RealNodeWait: wait,
	}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func clientFor(t *testing.T, stateDir string) kubernetes.Interface {
	t.Helper()
	rc, err := RESTConfig(KubeconfigPath(stateDir))
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(rc)
}

// runOnRealNode runs a pod on the node that echoes what the checks need and returns its log.
func runOnRealNode(ctx context.Context, t *testing.T, cs kubernetes.Interface, node, image, name, script string, gpus int64) string {
	t.Helper()
	res := corev1.ResourceList{}
	if gpus > 0 {
		res[GPUResource] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			NodeSelector:  map[string]string{RealNodeLabel: "true", "kubernetes.io/hostname": node},
			Tolerations:   []corev1.Toleration{{Key: RealNodeLabel, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{
				Name: "c", Image: image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/sh", "-c", script}, Resources: corev1.ResourceRequirements{Limits: res},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phase corev1.PodPhase
	waitFor(ctx, t, "pod "+name+" finished", func() (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	out, err := cs.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of %s: %v", name, err)
	}
	if phase != corev1.PodSucceeded {
		t.Fatalf("pod %s %s; log:\n%s", name, phase, out)
	}
	return string(out)
}

// requireRealNodeHost skips a real-node test where the host cannot run the node, except under
// CI=true, where that fails it.
func requireRealNodeHost(t *testing.T) {
	t.Helper()
	if why := realNodeUnsupported(); why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %s", why)
		}
		t.Skip(why)
	}
}

// upRealNode starts cfg's cluster with the real node; a machine whose node another cluster
// holds skips the test, except under CI=true.
func upRealNode(ctx context.Context, t *testing.T, cfg Config) {
	t.Helper()
	start := time.Now()
	if err := Up(ctx, cfg); err != nil {
		var busy *nodeBusyError
		if errors.As(err, &busy) && os.Getenv("CI") != "true" {
			t.Skipf("another cluster on this machine holds its real node: %v", err)
		}
		t.Fatalf("up --real-node: %v", err)
	}
	t.Logf("up --real-node took %s", time.Since(start).Round(10*time.Millisecond))
}

// TestRealNode starts a cluster with the real node, runs pods on it (DNS, GPU env, an image
// with only /bin/sh), starts a second cluster beside it, and checks that down leaves the host
// as it found it. Under `make e2e` the suite's own cluster holds the machine's real node; then
// the beside checks run against that one, and the full cycle runs in `make e2e`'s first step
// (`go test -run TestRealNode ./test/localcluster/`, before the suite's cluster comes up).
func TestRealNode(t *testing.T) {
	requireRealNodeHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	if outer := os.Getenv("TAO_REAL_NODE"); outer != "" {
		// The suite's cluster (KUBECONFIG) holds the machine's node.
		testBeside(ctx, t, filepath.Dir(os.Getenv("KUBECONFIG")), outer)
		return
	}
	first := testCluster(t, 1, RealNodeOn, 3*time.Minute)
	// A run killed before its down (a stopped CI machine, a cancelled job) leaves its node on the
	// host, and up would clean that up: the host this test must restore is the one without it.
	if lock, err := acquireMachineLock(ctx, 3*time.Minute, first.logf); err == nil {
		reclaimStaleRealNode(ctx, first)
		lock.release()
	}
	before := snapshotHost(t)
	upRealNode(ctx, t, first)
	downed := false
	defer func() {
		if !downed {
			_ = Down(context.Background(), first)
		}
	}()
	info, ok := readNodeInfo(realNodeFile(first.StateDir))
	if !ok {
		t.Fatal("no node record after up")
	}
	cs := clientFor(t, first.StateDir)

	t.Run("pods", func(t *testing.T) {
		// Cluster DNS (a Service name through CoreDNS on the bridge) and the device plugin's
		// GPU env, in the test image.
		log := runOnRealNode(ctx, t, cs, info.Name, shortRef(TestImageRef), "dns-gpu",
			`getent hosts kubernetes.default.svc.cluster.local >/dev/null && echo dns-ok; echo "gpus=$NVIDIA_VISIBLE_DEVICES"; cat /etc/resolv.conf | grep -c nameserver`, 2)
		if !strings.Contains(log, "dns-ok") {
			t.Errorf("no cluster DNS in the pod:\n%s", log)
		}
		ids := GPUDeviceIDs(first.StateDir, RealNodeGPUs)
		var line string
		for _, l := range strings.Split(log, "\n") {
			if strings.HasPrefix(l, "gpus=") {
				line = strings.TrimPrefix(l, "gpus=")
			}
		}
		got := strings.Split(line, ",")
		if len(got) != 2 || !contains(ids, got[0]) || !contains(ids, got[1]) {
			t.Errorf("NVIDIA_VISIBLE_DEVICES=%q, want 2 of %v", line, ids)
		}
		// The sh-only image really has no bash.
		log = runOnRealNode(ctx, t, cs, info.Name, shortRef(ShOnlyImageRef), "sh-only", `test -e /bin/bash && echo has-bash || echo no-bash`, 0)
		if strings.TrimSpace(log) != "no-bash" {
			t.Errorf("sh-only image: %q", log)
		}
	})

	t.Run("images-pinned", func(t *testing.T) {
		// A nearly full host disk makes the kubelet remove unused images; these could not be
		// pulled back, so each must carry containerd's pinned label.
		bins, err := EnsureNodeBinaries(ctx, first.KubernetesVersion, first.CacheDir, first.SourceDir, first.Progress)
		if err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(info.Dir, "ctrd", "containerd.sock")
		out, err := exec.CommandContext(ctx, bins[CompCtr], "--address", sock, "-n", "k8s.io", "images", "ls").CombinedOutput()
		if err != nil {
			t.Fatalf("ctr images ls: %v\n%s", err, out)
		}
		for _, ref := range info.Images {
			found := false
			for _, l := range strings.Split(string(out), "\n") {
				if f := strings.Fields(l); len(f) > 0 && f[0] == ref {
					found = true
					if !strings.Contains(l, pinnedImageLabel) {
						t.Errorf("image %s is not pinned: %s", ref, l)
					}
				}
			}
			if !found {
				t.Errorf("image %s is not on the node:\n%s", ref, out)
			}
		}
	})

	t.Run("beside", func(t *testing.T) { testBeside(ctx, t, first.StateDir, info.Name) })

	start := time.Now()
	if err := Down(context.Background(), first); err != nil {
		t.Fatalf("down: %v", err)
	}
	downed = true
	t.Logf("down took %s", time.Since(start).Round(10*time.Millisecond))
	after := snapshotHost(t)
	if !reflect.DeepEqual(before, after) {
		t.Errorf("the host differs after down:\nbefore %+v\nafter  %+v", before, after)
	}
	exes := []string{logsimExe(first.StateDir)}
	for _, b := range NodeBinaries(DefaultKubeVersion()) {
		exes = append(exes, b.Path(first.CacheDir))
	}
	if left := findOurProcesses(first.StateDir, exes, ReadProc); len(left) > 0 {
		t.Errorf("node processes left after down: %v", left)
	}
	if m := mountsUnder(first.StateDir); len(m) > 0 {
		t.Errorf("mounts left after down: %v", m)
	}
	for _, d := range cgroupDirsOf(info) {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s left after down", d)
		}
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", info.Bridge)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bridge %s left after down", info.Bridge)
	}
	if _, err := os.Stat(first.StateDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir left after down")
	}
}

// testBeside starts a second cluster while firstDir's cluster holds the machine's real node:
// with --real-node=auto it comes up without one, saying who holds it; with --real-node=1 it
// fails after its wait, naming the holder, and leaves nothing; the first node stays Ready.
func testBeside(ctx context.Context, t *testing.T, firstDir, firstNode string) {
	// A cluster without the real node comes up beside the first.
	off := testCluster(t, 1, RealNodeOff, time.Second)
	if err := Up(ctx, off); err != nil {
		t.Fatalf("second cluster, --real-node=0: %v", err)
	}
	if err := Down(context.Background(), off); err != nil {
		t.Errorf("down of the second cluster: %v", err)
	}
	// auto: without CI=true it comes up without the node and says who holds it; under CI=true a
	// node that cannot start is a failure, so it fails as --real-node=1 does (checked below).
	if os.Getenv("CI") != "true" {
		auto := testCluster(t, 1, RealNodeAuto, time.Second)
		if err := Up(ctx, auto); err != nil {
			t.Fatalf("second cluster, --real-node=auto: %v", err)
		}
		env, _ := os.ReadFile(filepath.Join(auto.StateDir, RealNodeEnvFile))
		skip := envValue(string(env), "TAO_REAL_NODE_SKIP")
		if envValue(string(env), "TAO_REAL_NODE") != "" || !strings.Contains(skip, "pid ") || !strings.Contains(skip, firstDir) {
			t.Errorf("second cluster's realnode.env does not name the holder (%s):\n%s", firstDir, env)
		}
		if err := Down(context.Background(), auto); err != nil {
			t.Errorf("down of the second cluster: %v", err)
		}
	}
	on := testCluster(t, 1, RealNodeOn, time.Second)
	err := Up(ctx, on)
	if err == nil {
		_ = Down(context.Background(), on)
		t.Fatal("a second cluster got the machine's real node while the first held it")
	}
	if !strings.Contains(err.Error(), firstDir) || !strings.Contains(err.Error(), "pid ") {
		t.Errorf("error does not name the holder (pid, %s): %v", firstDir, err)
	}
	if _, serr := os.Stat(on.StateDir); serr == nil {
		if kind, _ := classifyDir(on.StateDir); kind == dirOurs {
			_ = Down(context.Background(), on)
		}
	}
	cs := clientFor(t, firstDir)
	node, err := cs.CoreV1().Nodes().Get(ctx, firstNode, metav1.GetOptions{})
	if err != nil || !nodeReady(node) {
		t.Errorf("the first cluster's real node %s is not Ready after the second came and went: %v", firstNode, err)
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", "tao"+nodeID(on.StateDir))); err == nil {
		t.Error("the failed second cluster left its bridge")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
