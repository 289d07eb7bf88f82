package localcluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The real node: a kubelet with containerd, runc, the CNI bridge and CoreDNS, joined to the
// cluster next to the simulated nodes, on which containers really run. Everything it owns is
// named after the state dir (node name, bridge, subnet, cgroup root, ports), and all its
// traffic stays on loopback and on the bridge it creates: the node IP is the bridge's gateway
// address, never the machine's own interface.

// RealNodeMode says whether up runs the real node.
type RealNodeMode string

const (
	RealNodeOff  RealNodeMode = "off"
	RealNodeAuto RealNodeMode = "auto" // where the host allows it (root on Linux, the machine's node free)
	RealNodeOn   RealNodeMode = "on"   // required: up fails without it
)

// ParseRealNodeMode reads --real-node / REAL_NODE.
func ParseRealNodeMode(s string) (RealNodeMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "0", "false", "off", "no":
		return RealNodeOff, nil
	case "1", "true", "on", "yes":
		return RealNodeOn, nil
	case "auto":
		return RealNodeAuto, nil
	}
	return "", fmt.Errorf("--real-node / REAL_NODE: %q is not one of 1, 0, auto", s)
}

// Names the real node is found and addressed by.
const (
	// RealNodeLabel is the label (value "true") and NoSchedule taint key of the real node: only
	// pods that select and tolerate it land there, so the KWOK tests are unchanged.
	RealNodeLabel = "kubectl-tao.dev/real-node"
	// CompDevicePlugin is the GPU device plugin process (`localcluster deviceplugin`).
	CompDevicePlugin = "deviceplugin"
	// RealNodeGPUs is how many nvidia.com/gpu the device plugin advertises.
	RealNodeGPUs = 8
	// RealNodeEnvFile holds the TAO_* variables the e2e tests read, in the state dir.
	RealNodeEnvFile = "realnode.env"
	// RuncWrapperName is the name under which the launcher acts as the seccomp-dropping runc
	// wrapper (see runcwrap.go).
	RuncWrapperName = "runc-noseccomp"
	// pinnedImageLabel is containerd's CRI label for an image the kubelet must never remove.
	pinnedImageLabel = "io.cri-containerd.pinned=pinned"
)

// The kubelet's device-plugin directory is compiled in, so only one kubelet per machine can
// run (two would delete each other's kubelet.sock). This directory holds the machine-wide lock
// and the record of the node that holds it, on tmpfs so a reboot clears both.
const (
	machineDir        = "/run/kubectl-tao-realnode"
	machineLockFile   = machineDir + "/lock"
	machineRecordFile = machineDir + "/node.json"
	devicePluginDir   = "/var/lib/kubelet/device-plugins"
	kubeletSocketName = "kubelet.sock"
)

// Host paths the node's programs use whatever they are told: created if missing at up and
// removed again (when empty) at down.
var fixedHostPaths = []string{
	"/var/lib/kubelet", devicePluginDir,
	"/var/log/containers",
	"/run/containerd", "/run/containerd/s", "/run/containerd/fifo",
	"/var/lib/cni", "/var/lib/cni/results",
	// util-linux mount's lock directory, made by the kubelet's mounts.
	"/run/mount",
}

// Kernel settings the kubelet (vm.*, kernel.*) and the CNI bridge (ip_forward) change at
// start; down puts the values found before back.
var nodeSysctls = []string{
	"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes", "net.ipv4.ip_forward",
}

// cgroupV1Controllers are the v1 hierarchies the kubelet's cgroupfs driver writes to; the
// node's cgroup root must exist in each.
var cgroupV1Controllers = []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "devices", "freezer", "blkio", "hugetlb", "systemd"}

// RealNodeInfo is everything that names or was changed for one real node, written before
// anything is created so that down, or the next up after a killed run, can undo it.
type RealNodeInfo struct {
	Name        string `json:"name"`
	StateDir    string `json:"stateDir"`
	Dir         string `json:"dir"`
	Bridge      string `json:"bridge"`
	Subnet      string `json:"subnet"`
	Gateway     string `json:"gateway"`
	Network     string `json:"network"`
	CgroupRoot  string `json:"cgroupRoot"`
	KubeletPort int    `json:"kubeletPort"`
	HealthzPort int    `json:"healthzPort"`
	DNSHealth   int    `json:"dnsHealthPort"`
	DNSReady    int    `json:"dnsReadyPort"`
	// Sysctls are the values found before the node started.
	Sysctls map[string]string `json:"sysctls"`
	// CreatedPaths are the fixed host paths that did not exist before.
	CreatedPaths []string `json:"createdPaths"`
	// CgroupDirs are the cgroup root's directories, one per hierarchy.
	CgroupDirs []string `json:"cgroupDirs"`
	// Images maps a role (test, sh-only, pause, torch, openmpi, mpich, openmpi-ssh, stager) to the imported reference.
	Images map[string]string `json:"images"`
	// ImagesUnavailable maps a role whose image this host cannot build (torch without
	// python3-torch, openmpi without openmpi-bin and python3-mpi4py, mpich without mpich,
	// openmpi-ssh without those and openssh) to why.
	ImagesUnavailable map[string]string `json:"imagesUnavailable,omitempty"`
	GPUs              int               `json:"gpus"`
	// MIGSlices is how many MIGResource slices the node's one GPU in MIG mode is cut into,
	// beside its GPUs whole ones; 0: no GPU in MIG mode.
	MIGSlices int `json:"migSlices,omitempty"`
}

func realNodeDir(stateDir string) string  { return filepath.Join(stateDir, "node") }
func realNodeFile(stateDir string) string { return filepath.Join(realNodeDir(stateDir), "node.json") }

// nodeID is a short stable hash of the state dir: two clusters never share names.
func nodeID(stateDir string) string {
	sum := sha256.Sum256([]byte(stateDir))
	return hex.EncodeToString(sum[:4])
}

// PlanRealNode derives the node's names from the state dir. The subnet is 10.244.<n>.0/24 with
// n from the same hash, moved on past any subnet an interface of this machine already uses.
func PlanRealNode(stateDir string, used []*net.IPNet) (RealNodeInfo, error) {
	id := nodeID(stateDir)
	sum := sha256.Sum256([]byte(stateDir))
	start := int(sum[4])
	for i := 0; i < 256; i++ {
		n := (start + i) % 256
		_, subnet, _ := net.ParseCIDR(fmt.Sprintf("10.244.%d.0/24", n))
		if overlapsAny(subnet, used) {
			continue
		}
		dir := realNodeDir(stateDir)
		return RealNodeInfo{
			Name:       "real-" + id,
			StateDir:   stateDir,
			Dir:        dir,
			Bridge:     "tao" + id, // an interface name has at most 15 bytes
			Subnet:     subnet.String(),
			Gateway:    fmt.Sprintf("10.244.%d.1", n),
			Network:    "tao-" + id,
			CgroupRoot: "/tao-" + id,
			GPUs:       RealNodeGPUs,
			Sysctls:    map[string]string{},
			Images:     map[string]string{},
		}, nil
	}
	return RealNodeInfo{}, errors.New("no free /24 in 10.244.0.0/16 for the real node's bridge")
}

func overlapsAny(n *net.IPNet, used []*net.IPNet) bool {
	for _, u := range used {
		if u.Contains(n.IP) || n.Contains(u.IP) {
			return true
		}
	}
	return false
}

// hostSubnets lists the networks of this machine's interfaces.
func hostSubnets() []*net.IPNet {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []*net.IPNet
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			out = append(out, n)
		}
	}
	return out
}

// realNodeUnsupported says why this host cannot run the real node, or "" if it can.
func realNodeUnsupported() string {
	if runtime.GOOS != "linux" {
		return "the real node needs Linux (this is " + runtime.GOOS + ")"
	}
	if os.Geteuid() != 0 {
		return "the real node needs root (cgroups, mounts, network namespaces, a bridge)"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "the real node needs the ip command (iproute2) to create its bridge"
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
			return "no cgroup hierarchy mounted at /sys/fs/cgroup"
		}
	}
	return ""
}

func cgroupV2() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
}

func writeJSONFile(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readNodeInfo(path string) (RealNodeInfo, bool) {
	var info RealNodeInfo
	data, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(data, &info) != nil || info.StateDir == "" {
		return RealNodeInfo{}, false
	}
	return info, true
}

// machineLock holds the machine-wide real-node lock: an flock on machineLockFile. The open
// file is handed to the device plugin process, which lives as long as the node, so the lock
// outlives `up` and is released by the kernel whenever the node's last holder dies.
type machineLock struct{ f *os.File }

// acquireMachineLock waits up to wait for the lock, then fails naming the holder.
func acquireMachineLock(ctx context.Context, wait time.Duration, logf func(string, ...any)) (*machineLock, error) {
	if err := os.MkdirAll(machineDir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", machineDir, err)
	}
	f, err := os.OpenFile(machineLockFile, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", machineLockFile, err)
	}
	deadline := time.Now().Add(wait)
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return &machineLock{f: f}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", machineLockFile, err)
		}
		holder := lockHolder()
		if time.Now().After(deadline) {
			f.Close()
			return nil, &nodeBusyError{holder: holder, waited: wait}
		}
		if !told {
			logf("the machine's real node is held by %s; waiting up to %s for it", holder, wait)
			told = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for the real-node lock: %w", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// nodeBusyError is a lock held by another cluster's real node.
type nodeBusyError struct {
	holder string
	waited time.Duration
}

func (e *nodeBusyError) Error() string {
	return fmt.Sprintf("another cluster's real node holds this machine's (one kubelet per machine: its device-plugin directory %s is fixed): %s; waited %s (`localcluster down --state-dir DIR` stops it)", devicePluginDir, e.holder, e.waited)
}

// lockHolder describes the holder from the record it wrote.
func lockHolder() string {
	data, err := os.ReadFile(machineLockFile)
	if err != nil || len(strings.TrimSpace(string(data))) == 0 {
		return "an unknown process (" + machineLockFile + ")"
	}
	return strings.TrimSpace(string(data))
}

func (l *machineLock) describe(pid int, stateDir string) {
	_ = l.f.Truncate(0)
	_, _ = l.f.WriteAt([]byte(fmt.Sprintf("pid %d, state dir %s\n", pid, stateDir)), 0)
}

func (l *machineLock) release() {
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	l.f.Close()
}

// readSysctl and writeSysctl use /proc/sys directly: no sysctl binary needed.
func sysctlPath(name string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
}

func readSysctl(name string) (string, bool) {
	data, err := os.ReadFile(sysctlPath(name))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(data)), true
}

func writeSysctl(name, value string) error {
	return os.WriteFile(sysctlPath(name), []byte(value+"\n"), 0o644)
}

// loadCA reads the cluster CA written by PKI.WriteFiles.
func loadCA(stateDir string) (*KeyPair, error) {
	certPEM, err := os.ReadFile(filepath.Join(pkiDir(stateDir), fileCACert))
	if err != nil {
		return nil, fmt.Errorf("read cluster CA: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(pkiDir(stateDir), fileCAKey))
	if err != nil {
		return nil, fmt.Errorf("read cluster CA key: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("cluster CA files are not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse cluster CA: %w", err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse cluster CA key: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("cluster CA key is not ECDSA")
	}
	return &KeyPair{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// runCmd runs a helper command (ip, ctr), returning its output in the error.
func runCmd(ctx context.Context, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// realNode is one start of the node.
type realNode struct {
	cfg   Config
	info  RealNodeInfo
	bins  map[string]string
	lock  *machineLock
	procs []*proc
}

func (n *realNode) path(p ...string) string {
	return filepath.Join(append([]string{n.info.Dir}, p...)...)
}

// ensureRealNode brings the real node to what cfg.RealNode asks, on a control plane that is up:
// it starts it when asked and not running (cleaning a dead one first), and records in the state
// dir why there is none otherwise.
func ensureRealNode(ctx context.Context, cfg Config, admin *clients, apiPort int) error {
	if cfg.RealNode == RealNodeOff {
		if info, ok := readNodeInfo(realNodeFile(cfg.StateDir)); ok && realNodeRunning(info) {
			cfg.logf("leaving the running real node %s as it is (REAL_NODE=0 does not stop it; `down` does)", info.Name)
			return nil
		}
		return writeRealNodeEnv(cfg.StateDir, nil, "the cluster was started without the real node (REAL_NODE=0)")
	}
	if info, ok := readNodeInfo(realNodeFile(cfg.StateDir)); ok {
		if realNodeRunning(info) {
			if info.MIGSlices != cfg.RealNodeMIGSlices {
				return fmt.Errorf("the running real node %s has %d MIG slices, not %d; run `localcluster down` first to change them (--real-node-mig-slices)", info.Name, info.MIGSlices, cfg.RealNodeMIGSlices)
			}
			cfg.logf("reusing the running real node %s", info.Name)
			// What up runs on the node runs again, if a test stopped it.
			if err := ensureGPUExporter(ctx, cfg, admin.cs, info); err != nil {
				return err
			}
			return writeRealNodeEnv(cfg.StateDir, &info, "")
		}
		cfg.logf("the real node %s is not running; cleaning up and starting it again", info.Name)
		downRealNode(ctx, cfg)
	}
	skip, err := startRealNode(ctx, cfg, admin, apiPort)
	if err != nil {
		return err
	}
	if skip != "" {
		cfg.logf("no real node: %s", skip)
		return writeRealNodeEnv(cfg.StateDir, nil, skip)
	}
	return nil
}

// realNodeProcesses are the node's long-running processes, in start order.
var realNodeProcesses = []string{CompDevicePlugin, CompContainerd, CompKubelet, CompCoreDNS}

// realNodeRunning reports whether every process of the node runs.
func realNodeRunning(info RealNodeInfo) bool {
	byName, _ := pidRecordsByName(info.StateDir)
	for _, name := range realNodeProcesses {
		r, ok := byName[name]
		if !ok {
			return false
		}
		if pi, alive := ReadProc(r.PID); !alive || !IsOurs(pi, r.Exe, info.StateDir) {
			return false
		}
	}
	return true
}

// startRealNode starts the node for cfg's cluster and waits until it is Ready with its GPUs.
// It returns a skip reason (and no error) when mode is auto and the host cannot run it.
// RealNodeVersionUnsupported says why the real node does not run Kubernetes release v, or "":
// it runs from RealNodeMinKubernetesMinor on, the oldest minor its containerd supports.
func RealNodeVersionUnsupported(v KubeVersion) string {
	if v.Minor < RealNodeMinKubernetesMinor {
		return fmt.Sprintf("the real node runs Kubernetes 1.%d or newer (containerd %s supports 1.%d+), not %s: use --real-node=0 or a newer --kubernetes-version",
			RealNodeMinKubernetesMinor, ContainerdVersion, RealNodeMinKubernetesMinor, v)
	}
	return ""
}

func startRealNode(ctx context.Context, cfg Config, admin *clients, apiPort int) (string, error) {
	if why := RealNodeVersionUnsupported(cfg.KubernetesVersion); why != "" {
		// A version chosen on purpose, not a host that lacks something: auto skips it even in CI.
		if cfg.RealNode == RealNodeOn {
			return "", errors.New(why)
		}
		return why, nil
	}
	if why := realNodeUnsupported(); why != "" {
		if cfg.RealNode == RealNodeOn || os.Getenv("CI") == "true" {
			return "", fmt.Errorf("real node: %s", why)
		}
		return why, nil
	}
	wait := cfg.RealNodeWait
	if wait == 0 && os.Getenv("CI") == "true" {
		// In CI a node that cannot start fails the run: give another holder time to finish.
		wait = 3 * time.Minute
	}
	bins, err := EnsureNodeBinaries(ctx, cfg.KubernetesVersion, cfg.CacheDir, cfg.SourceDir, cfg.Progress)
	if err != nil {
		return "", err
	}
	lock, err := acquireMachineLock(ctx, wait, cfg.logf)
	if err != nil {
		var busy *nodeBusyError
		if errors.As(err, &busy) && cfg.RealNode == RealNodeAuto && os.Getenv("CI") != "true" {
			return "real node not started: " + err.Error(), nil
		}
		return "", err
	}
	started := false
	defer func() {
		// The device plugin inherited the lock if the node started; the launcher's copy goes.
		if started {
			lock.f.Close()
		} else {
			lock.release()
		}
	}()
	reclaimStaleRealNode(ctx, cfg)
	info, err := PlanRealNode(cfg.StateDir, hostSubnets())
	if err != nil {
		return "", err
	}
	info.MIGSlices = cfg.RealNodeMIGSlices
	n := &realNode{cfg: cfg, info: info, bins: bins, lock: lock}
	begin := time.Now()
	if err := n.prepareHost(ctx); err != nil {
		return "", err
	}
	if err := n.start(ctx, admin, apiPort); err != nil {
		return "", err
	}
	started = true
	cfg.logf("real node %s Ready in %s (IP %s on bridge %s, %s)", info.Name, time.Since(begin).Round(10*time.Millisecond), info.Gateway, info.Bridge, info.gpuSummary())
	return "", nil
}

// prepareHost records what it is about to change, then makes the cgroups, host paths and
// bridge.
func (n *realNode) prepareHost(ctx context.Context) error {
	info := &n.info
	for _, s := range nodeSysctls {
		if v, ok := readSysctl(s); ok {
			info.Sysctls[s] = v
		}
	}
	for _, p := range fixedHostPaths {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			info.CreatedPaths = append(info.CreatedPaths, p)
		}
	}
	if cgroupV2() {
		info.CgroupDirs = []string{filepath.Join("/sys/fs/cgroup", info.CgroupRoot)}
	} else {
		for _, c := range cgroupV1Controllers {
			if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", c)); err == nil {
				info.CgroupDirs = append(info.CgroupDirs, filepath.Join("/sys/fs/cgroup", c, info.CgroupRoot))
			}
		}
	}
	// Written before anything exists, so a kill from here on leaves a full record.
	if err := n.saveInfo(); err != nil {
		return err
	}
	for _, p := range fixedHostPaths {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", p, err)
		}
	}
	for _, d := range info.CgroupDirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", d, err)
		}
		if filepath.Base(filepath.Dir(d)) == "cpuset" {
			// A new cpuset has no CPUs or memory nodes until given its parent's.
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(filepath.Dir(d), f))
				if err == nil {
					_ = os.WriteFile(filepath.Join(d, f), v, 0o644)
				}
			}
		}
	}
	// The bridge exists, with its gateway address, before the kubelet starts: the kubelet's
	// node IP, its server and CoreDNS bind that address.
	_ = runCmd(ctx, "ip", "link", "del", info.Bridge)
	for _, args := range [][]string{
		{"link", "add", info.Bridge, "type", "bridge"},
		{"addr", "add", info.Gateway + "/24", "dev", info.Bridge},
		{"link", "set", info.Bridge, "up"},
	} {
		if err := runCmd(ctx, "ip", args...); err != nil {
			return fmt.Errorf("create the node's bridge: %w", err)
		}
	}
	return nil
}

func (n *realNode) saveInfo() error {
	if err := writeJSONFile(realNodeFile(n.cfg.StateDir), n.info); err != nil {
		return fmt.Errorf("record the real node: %w", err)
	}
	if err := writeJSONFile(machineRecordFile, n.info); err != nil {
		return fmt.Errorf("record the real node: %w", err)
	}
	return nil
}

func (n *realNode) start(ctx context.Context, admin *clients, apiPort int) error {
	info := &n.info
	for _, d := range []string{"bin", "ctrd", "cni/net.d", "cni/ipam", "kubelet/root", "kubelet/pki", "kubelet/pod-logs", "runc", "images", "opt"} {
		if err := os.MkdirAll(n.path(d), 0o755); err != nil {
			return fmt.Errorf("create node directory: %w", err)
		}
	}
	// The runc containerd runs is the launcher under another name, which drops the seccomp
	// profile the kubelet always asks for and execs the real runc next to it.
	links := map[string]string{RuncWrapperName: logsimExe(n.cfg.StateDir), "runc": n.bins[CompRunc]}
	for name, target := range links {
		_ = os.Remove(n.path("bin", name))
		if err := os.Symlink(target, n.path("bin", name)); err != nil {
			return fmt.Errorf("link %s: %w", name, err)
		}
	}
	if err := n.writeConfigs(apiPort); err != nil {
		return err
	}
	// The device plugin goes first: it takes over the machine lock (so the lock lives as long
	// as the node) and registers with each kubelet it sees start.
	dpArgs := []string{"deviceplugin", "--state-dir=" + n.cfg.StateDir, "--gpus=" + strconv.Itoa(info.GPUs)}
	if info.MIGSlices > 0 {
		dpArgs = append(dpArgs, "--mig-slices="+strconv.Itoa(info.MIGSlices))
	}
	dp, err := n.startProc(CompDevicePlugin, logsimExe(n.cfg.StateDir), dpArgs, []*os.File{n.lock.f})
	if err != nil {
		return err
	}
	n.lock.describe(dp.pid, n.cfg.StateDir)
	ctrd, err := n.startProc(CompContainerd, n.bins[CompContainerd], []string{"--config=" + n.path("containerd.toml")}, nil)
	if err != nil {
		return err
	}
	c := &cluster{cfg: n.cfg}
	sock := n.path("ctrd", "containerd.sock")
	if err := c.waitFor(ctx, "containerd's socket", componentStartupTimeout, func(ctx context.Context) (bool, error) {
		conn, err := net.DialTimeout("unix", sock, time.Second)
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	}, ctrd, dp); err != nil {
		return err
	}
	images, err := BuildNodeImages(ctx, n.cfg.SourceDir, n.path("images"), n.cfg.Progress)
	if err != nil {
		return err
	}
	importStart := time.Now()
	for role, img := range images {
		if img.Unavailable != "" {
			if info.ImagesUnavailable == nil {
				info.ImagesUnavailable = map[string]string{}
			}
			info.ImagesUnavailable[role] = img.Unavailable
			continue
		}
		// Pinned, as the sandbox image is: the kubelet's image GC passes over it however full
		// the disk gets, and no registry could give it back.
		if err := runCmd(ctx, n.bins[CompCtr], "--address", sock, "-n", "k8s.io", "images", "import", "--label", pinnedImageLabel, img.Archive); err != nil {
			return fmt.Errorf("import image %s: %w", img.Ref, err)
		}
		info.Images[role] = img.Ref
	}
	fmt.Fprintf(n.cfg.Progress, "localcluster: imported the node's images in %s\n", time.Since(importStart).Round(10*time.Millisecond))
	if err := n.saveInfo(); err != nil {
		return err
	}
	kubelet, err := n.startProc(CompKubelet, n.bins[CompKubelet], []string{
		"--config=" + n.path("kubelet.yaml"),
		"--kubeconfig=" + n.path("kubelet.kubeconfig"),
		"--root-dir=" + n.path("kubelet", "root"),
		"--cert-dir=" + n.path("kubelet", "pki"),
		"--hostname-override=" + info.Name,
		"--node-ip=" + info.Gateway,
		"--node-labels=" + nodeLabelsFlag(info.GPUs, info.MIGSlices),
		"--v=1",
	}, nil)
	if err != nil {
		return err
	}
	dns, err := n.startProc(CompCoreDNS, n.bins[CompCoreDNS], []string{"-conf", n.path("Corefile")}, nil)
	if err != nil {
		return err
	}
	watch := []*proc{dp, ctrd, kubelet, dns}
	if err := c.waitFor(ctx, "the real node "+info.Name+" Ready with "+info.gpuSummary(), 2*time.Minute, func(ctx context.Context) (bool, error) {
		node, err := admin.cs.CoreV1().Nodes().Get(ctx, info.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return nodeReady(node) && info.advertises(node), nil
	}, watch...); err != nil {
		return err
	}
	readyURL := fmt.Sprintf("http://127.0.0.1:%d/ready", info.DNSReady)
	if err := c.waitFor(ctx, "CoreDNS /ready", componentStartupTimeout, func(ctx context.Context) (bool, error) {
		return httpOK(ctx, readyURL), nil
	}, watch...); err != nil {
		return err
	}
	if err := ensureGPUExporter(ctx, n.cfg, admin.cs, n.info, watch...); err != nil {
		return err
	}
	return writeRealNodeEnv(n.cfg.StateDir, &n.info, "")
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// gpuSummary says what the node's device plugin advertises, for progress lines.
func (info RealNodeInfo) gpuSummary() string {
	s := fmt.Sprintf("%d %s", info.GPUs, GPUResource)
	if info.MIGSlices > 0 {
		s += fmt.Sprintf(" and %d %s", info.MIGSlices, MIGResource)
	}
	return s
}

// advertises reports whether node's allocatable has every resource of the node's device plugin
// in full: the kubelet registers each one on its own, so a node can be Ready with one of them.
func (info RealNodeInfo) advertises(node *corev1.Node) bool {
	want := map[corev1.ResourceName]int64{GPUResource: int64(info.GPUs), MIGResource: int64(info.MIGSlices)}
	for name, n := range want {
		if q := node.Status.Allocatable[name]; q.Value() != n {
			return false
		}
	}
	return true
}

// nodeLabelsFlag is the kubelet's --node-labels: the simulated nodes' GPU Feature Discovery
// labels and the real node's own label. With MIG slices GFD counts the GPU in MIG mode too and
// labels the node with the mixed strategy, as MIGNodes does the simulated ones.
func nodeLabelsFlag(gpus, migSlices int) string {
	labels := gfdLabels(DefaultGPUProduct(), gpus)
	if migSlices > 0 {
		labels["nvidia.com/gpu.count"] = strconv.Itoa(gpus + 1)
		labels[migStrategyLabel] = "mixed"
	}
	labels[RealNodeLabel] = "true"
	labels["node.kubernetes.io/instance-type"] = "real-node"
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + labels[k]
	}
	return strings.Join(parts, ",")
}

// startProc starts a node process with the node's PATH (its bin dir first, then the cached
// containerd directory for the shim) and records its pid like the control plane's.
func (n *realNode) startProc(name, exe string, args []string, extra []*os.File) (*proc, error) {
	path := strings.Join([]string{n.path("bin"), filepath.Dir(n.bins[CompShim]), "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}, ":")
	p, err := startProcessEnv(n.cfg.StateDir, name, exe, args, []string{"PATH=" + path}, extra)
	if err != nil {
		return nil, err
	}
	n.procs = append(n.procs, p)
	return p, nil
}

// writeConfigs writes containerd's, the CNI's, the kubelet's and CoreDNS's configuration and
// the kubelet's credentials.
func (n *realNode) writeConfigs(apiPort int) error {
	info := &n.info
	pick := n.cfg.PickPort
	for _, p := range []*int{&info.KubeletPort, &info.HealthzPort, &info.DNSHealth, &info.DNSReady} {
		port, err := pick()
		if err != nil {
			return err
		}
		*p = port
	}
	if err := n.saveInfo(); err != nil {
		return err
	}
	ca, err := loadCA(n.cfg.StateDir)
	if err != nil {
		return err
	}
	kp, err := ca.Issue(CertSpec{CommonName: "system:node:" + info.Name, Organization: []string{"system:nodes"}, Client: true}, time.Now())
	if err != nil {
		return err
	}
	kubeconfig, err := RenderKubeconfig(fmt.Sprintf("https://127.0.0.1:%d", apiPort), ca.CertPEM, "system:node:"+info.Name, kp)
	if err != nil {
		return err
	}
	files := map[string]string{
		"kubelet.kubeconfig":               string(kubeconfig),
		"containerd.toml":                  containerdConfig(info, n.bins),
		"cni/net.d/10-tao.conflist":        cniConfig(info),
		"kubelet.yaml":                     kubeletConfigFor(kubeletConfig(info, pkiDir(n.cfg.StateDir)), n.cfg.KubernetesVersion.Minor),
		"Corefile":                         corefile(info, KubeconfigPath(n.cfg.StateDir)),
		"resolv.conf":                      "nameserver " + info.Gateway + "\n",
		"cni/ipam/.keep":                   "",
		"kubelet/pod-logs/.localcluster":   "",
		"images/.localcluster":             "",
		"ctrd/.localcluster-containerd":    "",
		"runc/.localcluster-runc-root":     "",
		"opt/.localcluster-containerd-opt": "",
	}
	for name, data := range files {
		if err := os.WriteFile(n.path(name), []byte(data), 0o600); err != nil {
			return fmt.Errorf("write node file %s: %w", name, err)
		}
	}
	return nil
}

func containerdConfig(info *RealNodeInfo, bins map[string]string) string {
	d := func(p ...string) string { return filepath.Join(append([]string{info.Dir}, p...)...) }
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = %[5]q
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %[6]q
  [plugins.'io.containerd.cri.v1.runtime']
    enable_selinux = false
    disable_apparmor = true
    # No CAP_SYS_RESOURCE here: runc cannot lower oom_score_adj below containerd's own.
    restrict_oom_score_adj = true
    cdi_spec_dirs = [%[11]q]
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = %[7]q
          Root = %[8]q
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%[9]q]
      conf_dir = %[10]q
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
`, d("ctrd", "root"), d("ctrd", "state"), d("ctrd", "containerd.sock"), d("ctrd", "containerd.sock.ttrpc"),
		d("opt"), PauseImageRef, d("bin", RuncWrapperName), d("runc"), filepath.Dir(bins[CompCNIBridge]), d("cni", "net.d"), d("cdi"))
}

func cniConfig(info *RealNodeInfo) string {
	data, _ := json.MarshalIndent(map[string]any{
		"cniVersion": "1.0.0",
		"name":       info.Network,
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": info.Bridge, "isGateway": true, "ipMasq": false, "hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": info.Subnet, "gateway": info.Gateway}}},
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": filepath.Join(info.Dir, "cni", "ipam"),
			},
		}},
	}, "", "  ")
	return string(data) + "\n"
}

// kubeletFieldSince is the minor that added each KubeletConfiguration field kubeletConfig sets
// which a kubelet of a supported minor may not know.
var kubeletFieldSince = map[string]int{"podLogsDir": 29, "failCgroupV1": 31}

// kubeletConfigFor drops from a kubelet configuration the top-level fields (and the comment
// lines right above them) that a kubelet of the given minor does not know.
func kubeletConfigFor(config string, minor int) string {
	var out, comments []string
	for _, line := range strings.SplitAfter(config, "\n") {
		if strings.HasPrefix(line, "#") {
			comments = append(comments, line)
			continue
		}
		key, _, found := strings.Cut(line, ":")
		if since, known := kubeletFieldSince[key]; found && known && minor < since {
			comments = nil
			continue
		}
		out = append(append(out, comments...), line)
		comments = nil
	}
	return strings.Join(append(out, comments...), "")
}

func kubeletConfig(info *RealNodeInfo, pki string) string {
	d := func(p ...string) string { return filepath.Join(append([]string{info.Dir}, p...)...) }
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This host has cgroup v1 only; the kubelet refuses it unless told.
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]s
containerRuntimeEndpoint: unix://%[2]s
podLogsDir: %[3]s
volumePluginDir: %[4]s
staticPodPath: ""
address: %[5]s
port: %[6]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[7]d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %[8]s}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
clusterDNS: [%[5]s]
resolvConf: %[9]s
podCIDR: %[10]s
registerWithTaints:
- {key: %[11]s, value: "true", effect: NoSchedule}
rotateCertificates: false
serverTLSBootstrap: false
serializeImagePulls: false
maxPods: 30
# The host's disk is shared with whatever else runs on the machine and is at times nearly full:
# disk pressure here must neither evict the tests' pods nor delete the imported images, which
# no registry can give back. 0%% switches a signal off; the images are pinned as well.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "0%%", imagefs.available: "0%%", nodefs.inodesFree: "0%%", imagefs.inodesFree: "0%%"}
evictionPressureTransitionPeriod: 10s
nodeStatusUpdateFrequency: 10s
syncFrequency: 10s
# true would make the kubelet exit: this host's kernel defaults differ from its wishes.
protectKernelDefaults: false
`, info.CgroupRoot, d("ctrd", "containerd.sock"), d("kubelet", "pod-logs"), d("kubelet", "volume-plugins"),
		info.Gateway, info.KubeletPort, info.HealthzPort, filepath.Join(pki, fileCACert), d("resolv.conf"), info.Subnet, RealNodeLabel)
}

// corefile serves cluster.local from the API and nothing else: no forwarding, so a lookup of
// an outside name fails here instead of leaving the machine.
func corefile(info *RealNodeInfo, kubeconfig string) string {
	return fmt.Sprintf(`cluster.local:53 {
    bind %[1]s
    errors
    health 127.0.0.1:%[2]d
    ready 127.0.0.1:%[3]d
    kubernetes cluster.local {
        kubeconfig %[4]s
        pods insecure
        ttl 5
    }
}
.:53 {
    bind %[1]s
    errors
    hosts {
        %[1]s host.tao.internal
    }
}
`, info.Gateway, info.DNSHealth, info.DNSReady, kubeconfig)
}

// writeRealNodeEnv writes the TAO_* variables the e2e tests read (see README, "the contract").
func writeRealNodeEnv(stateDir string, info *RealNodeInfo, skip string) error {
	vars := [][2]string{{"TAO_REAL_NODE", ""}, {"TAO_REAL_NODE_SKIP", skip}, {"TAO_REAL_NODE_IP", ""},
		{"TAO_TEST_IMAGE", ""}, {"TAO_SH_ONLY_IMAGE", ""}, {"TAO_STAGER_IMAGE", ""},
		{"TAO_TORCH_IMAGE", ""}, {"TAO_TORCH_IMAGE_SKIP", ""}, {"TAO_REAL_NODE_MIG_SLICES", "0"},
		{"TAO_OPENMPI_IMAGE", ""}, {"TAO_OPENMPI_IMAGE_SKIP", ""}, {"TAO_MPICH_IMAGE", ""}, {"TAO_MPICH_IMAGE_SKIP", ""},
		{"TAO_OPENMPI_SSH_IMAGE", ""}, {"TAO_OPENMPI_SSH_IMAGE_SKIP", ""}}
	if info != nil {
		vars[0][1], vars[2][1] = info.Name, info.Gateway
		vars[3][1], vars[4][1], vars[5][1] = shortRef(info.Images[ImageTest]), shortRef(info.Images[ImageShOnly]), info.Images[ImageStager]
		vars[6][1], vars[7][1] = shortRef(info.Images[ImageTorch]), info.ImagesUnavailable[ImageTorch]
		vars[8][1] = strconv.Itoa(info.MIGSlices)
		vars[9][1], vars[10][1] = shortRef(info.Images[ImageOpenMPI]), info.ImagesUnavailable[ImageOpenMPI]
		vars[11][1], vars[12][1] = shortRef(info.Images[ImageMPICH]), info.ImagesUnavailable[ImageMPICH]
		vars[13][1], vars[14][1] = shortRef(info.Images[ImageOpenMPISSH]), info.ImagesUnavailable[ImageOpenMPISSH]
	}
	var b strings.Builder
	for _, v := range vars {
		fmt.Fprintf(&b, "%s=%s\n", v[0], shellQuote(v[1]))
	}
	return os.WriteFile(filepath.Join(stateDir, RealNodeEnvFile), []byte(b.String()), 0o644)
}

// TestEnv is what `localcluster exec` adds to a command's environment: KUBECONFIG and the
// TAO_* variables of the state dir's realnode.env.
func TestEnv(stateDir string) ([]string, error) {
	env := []string{"KUBECONFIG=" + KubeconfigPath(stateDir)}
	data, err := os.ReadFile(filepath.Join(stateDir, RealNodeEnvFile))
	if err != nil {
		return nil, fmt.Errorf("read the real node's variables (is the cluster in %s up?): %w", stateDir, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, _, ok := strings.Cut(line, "="); ok {
			env = append(env, k+"="+envValue(string(data), k))
		}
	}
	return env, nil
}

// shortRef drops the docker.io/ the kubelet adds back, so tests pass the name users write.
func shortRef(ref string) string { return strings.TrimPrefix(ref, "docker.io/") }

func shellQuote(s string) string {
	if s == "" {
		return ""
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// downRealNode stops the node of the cluster in stateDir, if it has one, and undoes what its
// start changed on the host.
func downRealNode(ctx context.Context, cfg Config) {
	info, ok := readNodeInfo(realNodeFile(cfg.StateDir))
	if !ok {
		return
	}
	cfg.logf("stopping the real node %s", info.Name)
	teardownRealNode(ctx, cfg, info)
}

// teardownRealNode stops the node's pods and processes, unmounts, and removes the bridge,
// cgroups and host files it made, restoring the kernel settings. Every step is best effort and
// idempotent: it also cleans what a killed run left.
// reclaimStaleRealNode tears down the real node a dead run left on the host. The caller holds
// the machine lock, so any record left is a dead run's (killed launcher, reboot-less crash).
func reclaimStaleRealNode(ctx context.Context, cfg Config) {
	if stale, ok := readNodeInfo(machineRecordFile); ok {
		cfg.logf("cleaning up the real node a killed run left (state dir %s)", stale.StateDir)
		teardownRealNode(ctx, cfg, stale)
	}
}

func teardownRealNode(ctx context.Context, cfg Config, info RealNodeInfo) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	logf := cfg.logf
	// Pods first, through the kubelet, so each sandbox's network is torn down by the CNI.
	if cs := adminClient(info.StateDir); cs != nil {
		drainRealNode(ctx, cs, info.Name)
	}
	byName, _ := pidRecordsByName(info.StateDir)
	stop := func(name string) {
		if r, ok := byName[name]; ok {
			if pi, alive := ReadProc(r.PID); alive && IsOurs(pi, r.Exe, info.StateDir) {
				stopPid(r.PID, componentStopGrace, ReadProc)
			}
			_ = os.Remove(pidFilePath(info.StateDir, name))
		}
	}
	stop(CompKubelet)
	stop(CompCoreDNS)
	// Whatever still runs in the node's cgroups (containers the kubelet did not stop).
	killCgroups(cgroupDirsOf(info))
	shimSockets := ourShimSockets(info.StateDir)
	stop(CompContainerd)
	// Not the launcher copy: it also runs the cluster's logsim, which a node restart on a
	// healthy cluster must leave alone; the device plugin is stopped by its pid file below.
	var exes []string
	for _, b := range NodeBinaries(runningKubeVersion(cfg.StateDir)) {
		exes = append(exes, b.Path(cfg.CacheDir))
	}
	for _, pid := range findOurProcesses(info.StateDir, exes, ReadProc) {
		logf("stopping leftover node process %d", pid)
		stopPid(pid, 2*time.Second, ReadProc)
	}
	stop(CompDevicePlugin)
	for _, s := range shimSockets {
		_ = os.Remove(s)
	}
	unmountUnder(info.Dir)
	// CNI results and kubelet log links that name this node's network or directory.
	if entries, err := os.ReadDir("/var/lib/cni/results"); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), info.Network+"-") {
				_ = os.Remove(filepath.Join("/var/lib/cni/results", e.Name()))
			}
		}
	}
	if entries, err := os.ReadDir("/var/log/containers"); err == nil {
		for _, e := range entries {
			p := filepath.Join("/var/log/containers", e.Name())
			if t, err := os.Readlink(p); err == nil && strings.HasPrefix(t, info.Dir+"/") {
				_ = os.Remove(p)
			}
		}
	}
	for _, f := range []string{kubeletSocketName, "kubelet_internal_checkpoint", devicePluginSocket(info.StateDir, GPUResource), devicePluginSocket(info.StateDir, MIGResource)} {
		_ = os.Remove(filepath.Join(devicePluginDir, f))
	}
	if err := runCmd(ctx, "ip", "link", "show", info.Bridge); err == nil {
		if err := runCmd(ctx, "ip", "link", "del", info.Bridge); err != nil {
			logf("warning: %v", err)
		}
	}
	for _, d := range cgroupDirsOf(info) {
		if err := removeCgroupTree(d); err != nil {
			logf("warning: %v", err)
		}
	}
	keys := make([]string, 0, len(info.Sysctls))
	for k := range info.Sysctls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if cur, ok := readSysctl(k); ok && cur != info.Sysctls[k] {
			if err := writeSysctl(k, info.Sysctls[k]); err != nil {
				logf("warning: restore %s=%s: %v", k, info.Sysctls[k], err)
			}
		}
	}
	// Deepest first, and only if empty: another program may have put something there since.
	created := append([]string(nil), info.CreatedPaths...)
	sort.Sort(sort.Reverse(sort.StringSlice(created)))
	for _, p := range created {
		_ = os.Remove(p)
	}
	if cs := adminClient(info.StateDir); cs != nil {
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		if err := cs.CoreV1().Nodes().Delete(dctx, info.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			logf("warning: delete node %s: %v", info.Name, err)
		}
		dcancel()
	}
	if rec, ok := readNodeInfo(machineRecordFile); ok && rec.StateDir == info.StateDir {
		_ = os.Remove(machineRecordFile)
	}
	if err := os.RemoveAll(info.Dir); err != nil {
		logf("warning: remove %s: %v", info.Dir, err)
	}
	_ = os.Remove(filepath.Join(info.StateDir, RealNodeEnvFile))
}

// adminClient is a short-timeout client for teardown, or nil if the cluster is gone.
func adminClient(stateDir string) kubernetes.Interface {
	rc, err := RESTConfig(KubeconfigPath(stateDir))
	if err != nil {
		return nil
	}
	rc.Timeout = 5 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil
	}
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background()); err != nil {
		return nil
	}
	return cs
}

// drainRealNode deletes the node's pods and waits (briefly) for the kubelet to stop them.
func drainRealNode(ctx context.Context, cs kubernetes.Interface, node string) {
	sel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + node}
	pods, err := cs.CoreV1().Pods("").List(ctx, sel)
	if err != nil || len(pods.Items) == 0 {
		return
	}
	grace := int64(1)
	for _, p := range pods.Items {
		_ = cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		pods, err := cs.CoreV1().Pods("").List(ctx, sel)
		if err != nil || len(pods.Items) == 0 {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// cgroupDirsOf lists the node's cgroup root in every hierarchy where it exists: the ones up
// made, and those the kubelet and runc made themselves (the v2 "unified" hierarchy of a hybrid
// host, for one).
func cgroupDirsOf(info RealNodeInfo) []string {
	seen := map[string]bool{}
	var out []string
	add := func(d string) {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	for _, d := range info.CgroupDirs {
		add(d)
	}
	if info.CgroupRoot == "" {
		return out
	}
	hier, _ := os.ReadDir("/sys/fs/cgroup")
	for _, h := range hier {
		d := filepath.Join("/sys/fs/cgroup", h.Name(), info.CgroupRoot)
		if _, err := os.Stat(d); err == nil {
			add(d)
		}
	}
	if d := filepath.Join("/sys/fs/cgroup", info.CgroupRoot); dirExists(d) {
		add(d)
	}
	return out
}

func dirExists(d string) bool {
	fi, err := os.Stat(d)
	return err == nil && fi.IsDir()
}

// killCgroups SIGKILLs every process in the cgroup trees.
func killCgroups(dirs []string) {
	for i := 0; i < 3; i++ {
		found := false
		for _, d := range dirs {
			_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
				if err != nil || e.IsDir() || e.Name() != "cgroup.procs" {
					return nil
				}
				data, _ := os.ReadFile(p)
				for _, f := range strings.Fields(string(data)) {
					if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
						found = true
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
				return nil
			})
		}
		if !found {
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// removeCgroupTree removes a cgroup directory and its children, deepest first (cgroupfs
// directories go with rmdir, never with their files).
func removeCgroupTree(dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var last error
	for i := len(dirs) - 1; i >= 0; i-- {
		for attempt := 0; attempt < 20; attempt++ {
			err := syscall.Rmdir(dirs[i])
			if err == nil || errors.Is(err, syscall.ENOENT) {
				last = nil
				break
			}
			last = fmt.Errorf("remove cgroup %s: %w", dirs[i], err)
			time.Sleep(100 * time.Millisecond)
		}
	}
	return last
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) {
	for attempt := 0; attempt < 3; attempt++ {
		mounts := mountsUnder(dir)
		if len(mounts) == 0 {
			return
		}
		for _, m := range mounts {
			_ = syscall.Unmount(m, mntDetach)
		}
	}
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ourShimSockets returns the sockets of the running shims of this state dir's containerd,
// which a killed shim leaves in /run/containerd/s. containerd names each after
// sha256(<containerd address>/<namespace>/<id>).
func ourShimSockets(stateDir string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		info, ok := ReadProc(pid)
		if !ok || filepath.Base(info.Exe) != CompShim {
			continue
		}
		var ns, id, addr string
		for i := 0; i+1 < len(info.Cmdline); i++ {
			switch info.Cmdline[i] {
			case "-namespace":
				ns = info.Cmdline[i+1]
			case "-id":
				id = info.Cmdline[i+1]
			case "-address":
				addr = info.Cmdline[i+1]
			}
		}
		if addr == "" || !strings.HasPrefix(addr, stateDir+"/") {
			continue
		}
		for _, p := range []string{filepath.Join(addr, ns, id), filepath.Join(addr, ns, id, "debug")} {
			sum := sha256.Sum256([]byte(p))
			out = append(out, filepath.Join("/run/containerd/s", hex.EncodeToString(sum[:])))
		}
	}
	return out
}
