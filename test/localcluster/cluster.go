package localcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Defaults for the cluster shape.
const (
	DefaultNodes       = 4
	DefaultGPUsPerNode = 8
	// MaxNodes keeps a typo (GPU_NODES=500000) from filling etcd on a laptop.
	MaxNodes = 20000
)

// kwokLeaseSeconds is longer than kwok's 40 s default so 5,000 nodes renew about 100 leases a
// second instead of 500; kube-controller-manager's grace period is raised to match.
const (
	kwokLeaseSeconds        = 200
	nodeMonitorGracePeriod  = "240s"
	componentStopGrace      = 10 * time.Second
	nodeCreateWorkers       = 64
	launcherClientQPS       = 2000
	launcherClientBurst     = 4000
	kwokParallelism         = 32
	defaultReadyTimeout     = 3 * time.Minute
	componentStartupTimeout = 60 * time.Second
)

// Config says where a cluster lives and what it looks like.
type Config struct {
	// StateDir holds everything the running cluster owns; made absolute by Complete.
	StateDir string
	// CacheDir holds the built binaries, by version.
	CacheDir string
	// SourceDir is the repository root, needed only to build missing binaries.
	SourceDir   string
	Nodes       int
	GPUsPerNode int
	// SelfExe is the launcher binary; the logsim daemon runs a copy of it.
	SelfExe string
	// Progress receives what the launcher is doing (stderr in the CLI).
	Progress     io.Writer
	PickPort     PortPicker
	ReadyTimeout time.Duration
	// RealNode says whether up also runs a real kubelet node next to the simulated ones (see
	// realnode.go); RealNodeWait is how long up waits for another cluster's node to go.
	RealNode     RealNodeMode
	RealNodeWait time.Duration
	// RealNodeMIGSlices > 0 gives the real node, beside its whole GPUs, one GPU in MIG mode
	// cut into that many MIGResource slices (the MIG mixed strategy); 0 leaves it whole GPUs.
	RealNodeMIGSlices int
	// Kueue says whether up also installs and runs Kueue (kueue.go). A cluster reused without
	// it keeps a Kueue it already runs.
	Kueue bool
	// KubernetesVersion is the Kubernetes release the cluster runs (zero: the default).
	KubernetesVersion KubeVersion
}

// Complete fills defaults and resolves paths.
func (c *Config) Complete() error {
	if c.StateDir == "" {
		return errors.New("state directory not set (--state-dir)")
	}
	abs, err := filepath.Abs(c.StateDir)
	if err != nil {
		return fmt.Errorf("resolve state directory %s: %w", c.StateDir, err)
	}
	c.StateDir = abs
	if c.CacheDir == "" {
		if c.CacheDir, err = DefaultCacheDir(); err != nil {
			return err
		}
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.PickPort == nil {
		c.PickPort = FreeLoopbackPort
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = defaultReadyTimeout
	}
	if c.RealNode == "" {
		c.RealNode = RealNodeOff
	}
	if c.KubernetesVersion.IsZero() {
		c.KubernetesVersion = DefaultKubeVersion()
	}
	return nil
}

// Validate checks the shape.
func (c *Config) Validate() error {
	if c.Nodes < 1 || c.Nodes > MaxNodes {
		return fmt.Errorf("node count %d out of range 1..%d (GPU_NODES / --nodes)", c.Nodes, MaxNodes)
	}
	if c.GPUsPerNode < 0 || c.GPUsPerNode > 1024 {
		return fmt.Errorf("GPUs per node %d out of range 0..1024 (GPUS_PER_NODE / --gpus-per-node)", c.GPUsPerNode)
	}
	if c.RealNodeMIGSlices < 0 || c.RealNodeMIGSlices > MIGSlicesPerGPU {
		return fmt.Errorf("real node MIG slices %d out of range 0..%d, what one GPU holds of %s (--real-node-mig-slices)", c.RealNodeMIGSlices, MIGSlicesPerGPU, MIGProfile)
	}
	return nil
}

func (c *Config) logf(format string, args ...any) {
	fmt.Fprintf(c.Progress, "localcluster: "+format+"\n", args...)
}

// KubeconfigPath is the admin kubeconfig of the cluster in stateDir.
func KubeconfigPath(stateDir string) string { return filepath.Join(stateDir, KubeconfigFile) }

// componentOrder is the start order; stopping goes in reverse.
var componentOrder = []string{CompEtcd, CompAPIServer, CompControllerManager, CompScheduler, CompKwok, CompLogsim}

// Up starts the cluster, or reuses a healthy one, and returns once every node is Ready and
// the default ServiceAccount exists. On failure everything it started is stopped again.
func Up(ctx context.Context, cfg Config) error {
	if err := cfg.Complete(); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	raiseInotifyInstances(InotifyInstancesWanted(cfg.Nodes), readSysctl, writeSysctl, cfg.logf)
	unlock, err := lockStateParent(ctx, cfg)
	if err != nil {
		return err
	}
	defer unlock()
	kind, err := classifyDir(cfg.StateDir)
	if err != nil {
		return err
	}
	switch kind {
	case dirForeign:
		return fmt.Errorf("state directory %s exists and was not made by localcluster; refusing to use or delete it", cfg.StateDir)
	case dirOurs:
		healthy, why := checkHealthy(ctx, cfg.StateDir)
		if healthy {
			cfg.logf("reusing the running cluster in %s", cfg.StateDir)
			return reuse(ctx, cfg)
		}
		cfg.logf("found stale state in %s (%s); cleaning it up", cfg.StateDir, why)
		if err := down(cfg, false); err != nil {
			return fmt.Errorf("clean up stale state: %w", err)
		}
	}

	bins, err := EnsureBinaries(ctx, cfg.KubernetesVersion, cfg.CacheDir, cfg.SourceDir, cfg.Progress)
	if err != nil {
		return err
	}
	if cfg.Kueue {
		// Built before the start, so a cold build never runs while the cluster waits.
		if _, err := EnsureKueue(ctx, cfg.CacheDir, cfg.SourceDir, cfg.Progress); err != nil {
			return err
		}
	}
	for attempt := 1; ; attempt++ {
		start := time.Now()
		err := startCluster(ctx, cfg, bins)
		if err == nil {
			cfg.logf("cluster ready in %s: %d nodes x %d nvidia.com/gpu; export KUBECONFIG=%s",
				time.Since(start).Round(10*time.Millisecond), cfg.Nodes, cfg.GPUsPerNode, KubeconfigPath(cfg.StateDir))
			return nil
		}
		cfg.logf("start failed: %v", err)
		cfg.logf("stopping what was started")
		if derr := down(cfg, true); derr != nil {
			cfg.logf("%v", derr)
		}
		var pe *portInUseError
		if attempt < 3 && errors.As(err, &pe) && ctx.Err() == nil {
			cfg.logf("%s lost its port to another process; retrying with new ports", pe.component)
			continue
		}
		return err
	}
}

// portInUseError marks a start that failed because a chosen port was taken between picking
// and binding; Up retries those.
type portInUseError struct {
	component string
	err       error
}

func (e *portInUseError) Error() string { return e.err.Error() }
func (e *portInUseError) Unwrap() error { return e.err }

// cluster is one start attempt's live view.
type cluster struct {
	cfg   Config
	bins  map[string]string
	ports Ports
	pki   *PKI
	procs []*proc
}

func startCluster(ctx context.Context, cfg Config, bins map[string]string) error {
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	if err := writeMarker(cfg.StateDir); err != nil {
		return err
	}
	ports, err := PickPorts(cfg.PickPort)
	if err != nil {
		return err
	}
	pki, err := NewPKI(time.Now())
	if err != nil {
		return err
	}
	c := &cluster{cfg: cfg, bins: bins, ports: ports, pki: pki}
	begin := time.Now()
	since := func() time.Duration { return time.Since(begin).Round(10 * time.Millisecond) }
	if err := c.writeFiles(); err != nil {
		return err
	}
	admin, err := c.clients(KubeconfigPath(cfg.StateDir))
	if err != nil {
		return err
	}

	cfg.logf("starting etcd %s, kube-apiserver %s (port %d)", EtcdVersion, cfg.KubernetesVersion, ports.APIServer)
	etcd, err := c.start(CompEtcd)
	if err != nil {
		return err
	}
	// The apiserver retries its etcd connection, so both start at once: etcd's second of
	// start-up hides inside the apiserver's.
	apiserver, err := c.start(CompAPIServer)
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, "kube-apiserver /readyz", componentStartupTimeout, func(ctx context.Context) (bool, error) {
		_, err := admin.cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil, nil
	}, etcd, apiserver); err != nil {
		return err
	}

	// The controller-manager and scheduler need nothing from the API but default RBAC, which
	// /readyz guarantees; starting them now overlaps their start-up with the node creation.
	for _, name := range []string{CompControllerManager, CompScheduler} {
		if _, err := c.start(name); err != nil {
			return err
		}
	}
	cfg.logf("kube-apiserver ready (%s); installing kwok stages", since())
	if err := InstallKwokObjects(ctx, admin.dyn); err != nil {
		return err
	}
	// kwok takes nodes over as they appear, so creating them after it starts overlaps the two
	// slow halves of a 5,000-node start.
	for _, name := range []string{CompKwok, CompLogsim} {
		if _, err := c.start(name); err != nil {
			return err
		}
	}
	cfg.logf("kwok started (%s); creating %d nodes", since(), cfg.Nodes)
	if err := EnsureNodes(ctx, admin.cs, cfg.Nodes, NodeShape{GPUs: cfg.GPUsPerNode, KubeletPort: ports.Kwok, KubeletVersion: cfg.KubernetesVersion.String()}, nodeCreateWorkers); err != nil {
		return err
	}
	cfg.logf("nodes created (%s); waiting for kwok to take them over", since())
	if err := c.waitReady(ctx, admin, c.procs...); err != nil {
		return err
	}
	if err := ensureRealNode(ctx, cfg, admin, ports.APIServer); err != nil {
		return err
	}
	st := State{Ports: ports, Nodes: cfg.Nodes, GPUsPerNode: cfg.GPUsPerNode, Binaries: bins, StartedAt: time.Now().UTC(), KubernetesVersion: cfg.KubernetesVersion.String()}
	if cfg.Kueue {
		if err := c.ensureKueue(ctx, admin, &st); err != nil {
			return err
		}
	}
	return writeState(cfg.StateDir, st)
}

// reuse brings a healthy running cluster to the requested shape.
func reuse(ctx context.Context, cfg Config) error {
	st, err := ReadState(cfg.StateDir)
	if err != nil {
		return err
	}
	if running := st.kubeVersion(); running != cfg.KubernetesVersion {
		return fmt.Errorf("the running cluster runs Kubernetes %s, not %s; run `localcluster down` first to change the version", running, cfg.KubernetesVersion)
	}
	if st.GPUsPerNode != cfg.GPUsPerNode {
		return fmt.Errorf("the running cluster has %d GPUs per node, not %d; run `localcluster down` first to change the node shape", st.GPUsPerNode, cfg.GPUsPerNode)
	}
	c := &cluster{cfg: cfg, ports: st.Ports, bins: st.Binaries}
	admin, err := c.clients(KubeconfigPath(cfg.StateDir))
	if err != nil {
		return err
	}
	if err := EnsureNodes(ctx, admin.cs, cfg.Nodes, NodeShape{GPUs: cfg.GPUsPerNode, KubeletPort: st.Ports.Kwok, KubeletVersion: cfg.KubernetesVersion.String()}, nodeCreateWorkers); err != nil {
		return err
	}
	if err := c.waitReady(ctx, admin); err != nil {
		return err
	}
	if err := ensureRealNode(ctx, cfg, admin, st.Ports.APIServer); err != nil {
		return err
	}
	if cfg.Kueue || st.Kueue != nil {
		if err := c.ensureKueue(ctx, admin, &st); err != nil {
			return err
		}
	}
	st.Nodes = cfg.Nodes
	if err := writeState(cfg.StateDir, st); err != nil {
		return err
	}
	cfg.logf("cluster ready: %d nodes x %d nvidia.com/gpu; export KUBECONFIG=%s", cfg.Nodes, cfg.GPUsPerNode, KubeconfigPath(cfg.StateDir))
	return nil
}

// waitReady waits for every simulated node to be Ready, the default ServiceAccount to exist
// (pods cannot be created before it) and the controller-manager and scheduler to be healthy.
func (c *cluster) waitReady(ctx context.Context, admin *clients, watch ...*proc) error {
	start := time.Now()
	lastReport := start
	// Listing thousands of nodes every 50 ms would itself slow the apiserver down.
	interval := 50 * time.Millisecond
	if c.cfg.Nodes > 100 {
		interval = time.Second
	}
	err := c.waitEvery(ctx, interval, fmt.Sprintf("%d nodes Ready", c.cfg.Nodes), c.cfg.ReadyTimeout, func(ctx context.Context) (bool, error) {
		total, ready, err := CountReadyNodes(ctx, admin.cs)
		if err != nil {
			return false, nil
		}
		leases, err := CountNodeLeases(ctx, admin.cs)
		if err != nil {
			return false, nil
		}
		if time.Since(lastReport) > 5*time.Second {
			c.cfg.logf("%d/%d nodes Ready, %d taken over by kwok, after %s", ready, c.cfg.Nodes, leases, time.Since(start).Round(time.Second))
			lastReport = time.Now()
		}
		return total == c.cfg.Nodes && ready == c.cfg.Nodes && leases == c.cfg.Nodes, nil
	}, watch...)
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, "the default ServiceAccount in namespace default", componentStartupTimeout, func(ctx context.Context) (bool, error) {
		_, err := admin.cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}, watch...); err != nil {
		return err
	}
	for _, hc := range []struct {
		name string
		port int
	}{{CompControllerManager, c.ports.ControllerManager}, {CompScheduler, c.ports.Scheduler}} {
		url := fmt.Sprintf("https://127.0.0.1:%d/healthz", hc.port)
		if err := c.waitFor(ctx, hc.name+" /healthz", componentStartupTimeout, func(ctx context.Context) (bool, error) {
			return httpOK(ctx, url), nil
		}, watch...); err != nil {
			return err
		}
	}
	return nil
}

// waitFor polls cond until it holds, failing at once with the component's log tail if one of
// the watched processes exits, since waiting out the timeout would only hide the reason.
func (c *cluster) waitFor(ctx context.Context, what string, timeout time.Duration, cond wait.ConditionWithContextFunc, watch ...*proc) error {
	return c.waitEvery(ctx, 50*time.Millisecond, what, timeout, cond, watch...)
}

func (c *cluster) waitEvery(ctx context.Context, interval time.Duration, what string, timeout time.Duration, cond wait.ConditionWithContextFunc, watch ...*proc) error {
	var dead *proc
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		for _, p := range watch {
			if exited, _ := p.exited(); exited {
				dead = p
				return false, errors.New("component exited")
			}
		}
		return cond(ctx)
	})
	if dead != nil {
		err := dead.exitError()
		if strings.Contains(tailFile(dead.logPath, 40), "address already in use") {
			return &portInUseError{component: dead.name, err: err}
		}
		return fmt.Errorf("wait for %s: %w", what, err)
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("wait for %s: %w", what, ctx.Err())
		}
		return fmt.Errorf("wait for %s: not done after %s (component logs: %s): %w", what, timeout, filepath.Join(c.cfg.StateDir, "logs"), err)
	}
	return nil
}

func (c *cluster) start(name string) (*proc, error) {
	exe, args, err := componentCommand(name, c.cfg.StateDir, c.ports, c.bins)
	if err != nil {
		return nil, err
	}
	p, err := startProcess(c.cfg.StateDir, name, exe, args)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// Paths of the files startCluster writes.
func pkiDir(stateDir string) string { return filepath.Join(stateDir, "pki") }
func componentKubeconfig(stateDir, name string) string {
	return filepath.Join(stateDir, "kubeconfigs", name+".kubeconfig")
}
func kwokConfigPath(stateDir string) string { return filepath.Join(stateDir, "kwok.yaml") }
func logsimExe(stateDir string) string      { return filepath.Join(stateDir, "bin", "localcluster") }
func podLogsDir(stateDir string) string     { return filepath.Join(stateDir, "podlogs") }

func (c *cluster) writeFiles() error {
	dir := c.cfg.StateDir
	if err := c.pki.WriteFiles(pkiDir(dir)); err != nil {
		return err
	}
	server := fmt.Sprintf("https://127.0.0.1:%d", c.ports.APIServer)
	kubeconfigs := []struct {
		path string
		user string
		kp   *KeyPair
	}{
		{KubeconfigPath(dir), "kubernetes-admin", c.pki.Admin},
		{componentKubeconfig(dir, CompControllerManager), "system:kube-controller-manager", c.pki.ControllerManager},
		{componentKubeconfig(dir, CompScheduler), "system:kube-scheduler", c.pki.Scheduler},
		{componentKubeconfig(dir, CompKwok), "kwok", c.pki.Kwok},
	}
	if err := os.MkdirAll(filepath.Join(dir, "kubeconfigs"), 0o700); err != nil {
		return fmt.Errorf("create kubeconfig directory: %w", err)
	}
	for _, k := range kubeconfigs {
		data, err := RenderKubeconfig(server, c.pki.CA.CertPEM, k.user, k.kp)
		if err != nil {
			return err
		}
		if err := os.WriteFile(k.path, data, 0o600); err != nil {
			return fmt.Errorf("write kubeconfig %s: %w", k.path, err)
		}
	}
	if err := os.WriteFile(kwokConfigPath(dir), []byte(KwokConfiguration()), 0o644); err != nil {
		return fmt.Errorf("write kwok configuration: %w", err)
	}
	return installSelf(c.cfg.SelfExe, logsimExe(dir))
}

// installSelf copies the launcher into the state dir for the logsim daemon: under `go run` the
// launcher's own binary is deleted when `go run` exits, and a stable path is what lets Down
// recognise the daemon by its executable.
func installSelf(src, dst string) error {
	if src == "" {
		return errors.New("launcher executable unknown; cannot start the logsim daemon")
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read launcher executable %s: %w", src, err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(dst), err)
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return fmt.Errorf("copy launcher for the logsim daemon: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("copy launcher for the logsim daemon: %w", err)
	}
	return nil
}

// KwokConfiguration is kwok's --config: options only. Stages, Logs and ClusterLogs are CRDs
// here, and kwok refuses a kind that is both a CRD and in --config. Passing our own file also
// keeps a developer's ~/.kwok/kwok.yaml out of the cluster.
func KwokConfiguration() string {
	return fmt.Sprintf(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
metadata:
  name: kwok
options:
  # kwok defaults these only without a --config; kubectl logs needs the debugging handlers.
  enableDebuggingHandlers: true
  enableProfilingHandler: false
  enablePodsOnNodeSyncListPager: true
  nodeLeaseDurationSeconds: %d
  nodeLeaseParallelism: %d
  nodePlayStageParallelism: %d
  podPlayStageParallelism: %d
  podsOnNodeSyncParallelism: %d
`, kwokLeaseSeconds, kwokParallelism, kwokParallelism, kwokParallelism, kwokParallelism/4)
}

// componentCommand returns the executable and flags of a component.
func componentCommand(name, stateDir string, p Ports, bins map[string]string) (string, []string, error) {
	pki := func(f string) string { return filepath.Join(pkiDir(stateDir), f) }
	url := func(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }
	exe := bins[name]
	var args []string
	switch name {
	case CompEtcd:
		args = []string{
			"--name=localcluster",
			"--data-dir=" + filepath.Join(stateDir, "etcd"),
			"--listen-client-urls=" + url(p.EtcdClient),
			"--advertise-client-urls=" + url(p.EtcdClient),
			"--listen-peer-urls=" + url(p.EtcdPeer),
			"--initial-advertise-peer-urls=" + url(p.EtcdPeer),
			"--initial-cluster=localcluster=" + url(p.EtcdPeer),
			// A throwaway cluster: durability buys nothing and fsync costs seconds.
			"--unsafe-no-fsync",
			"--log-level=warn",
		}
	case CompAPIServer:
		args = []string{
			"--etcd-servers=" + url(p.EtcdClient),
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(p.APIServer),
			"--cert-dir=" + pkiDir(stateDir),
			"--tls-cert-file=" + pki(fileAPIServerCert),
			"--tls-private-key-file=" + pki(fileAPIServerKey),
			"--client-ca-file=" + pki(fileCACert),
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + pki(fileSAPub),
			"--service-account-signing-key-file=" + pki(fileSAKey),
			"--service-cluster-ip-range=10.96.0.0/16",
			"--authorization-mode=Node,RBAC",
			"--kubelet-client-certificate=" + pki(fileKubeletCert),
			"--kubelet-client-key=" + pki(fileKubeletKey),
			"--kubelet-preferred-address-types=InternalIP",
			// Without it the apiserver refuses a loopback advertise address.
			"--endpoint-reconciler-type=none",
			"--allow-privileged=true",
			"--max-requests-inflight=2000",
			"--max-mutating-requests-inflight=1000",
			"--profiling=false",
			// Nothing here competes for the apiserver, and its bootstrap costs start-up time.
			"--enable-priority-and-fairness=false",
			// The aggregation layer, for Kueue's visibility API (see FrontProxyCA). No
			// --enable-aggregator-routing: the aggregator then resolves an APIService's
			// Service itself, and an ExternalName Service reaches a host process on loopback
			// without kube-proxy.
			"--requestheader-client-ca-file=" + pki(fileFrontProxyCA),
			"--requestheader-allowed-names=" + FrontProxyClientName,
			"--requestheader-username-headers=X-Remote-User",
			"--requestheader-group-headers=X-Remote-Group",
			"--requestheader-extra-headers-prefix=X-Remote-Extra-",
			"--proxy-client-cert-file=" + pki(fileFrontProxyCrt),
			"--proxy-client-key-file=" + pki(fileFrontProxyKey),
		}
	case CompControllerManager:
		kc := componentKubeconfig(stateDir, name)
		args = []string{
			"--kubeconfig=" + kc,
			"--authentication-kubeconfig=" + kc,
			"--authorization-kubeconfig=" + kc,
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(p.ControllerManager),
			"--cert-dir=" + filepath.Join(pkiDir(stateDir), name),
			"--leader-elect=false",
			"--use-service-account-credentials=true",
			"--service-account-private-key-file=" + pki(fileSAKey),
			"--root-ca-file=" + pki(fileCACert),
			"--cluster-signing-cert-file=" + pki(fileCACert),
			"--cluster-signing-key-file=" + pki(fileCAKey),
			"--kube-api-qps=200",
			"--kube-api-burst=400",
			"--node-monitor-grace-period=" + nodeMonitorGracePeriod,
		}
	case CompScheduler:
		kc := componentKubeconfig(stateDir, name)
		args = []string{
			"--kubeconfig=" + kc,
			"--authentication-kubeconfig=" + kc,
			"--authorization-kubeconfig=" + kc,
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(p.Scheduler),
			"--cert-dir=" + filepath.Join(pkiDir(stateDir), name),
			"--leader-elect=false",
		}
	case CompKwok:
		args = []string{
			"--kubeconfig=" + componentKubeconfig(stateDir, name),
			"--config=" + kwokConfigPath(stateDir),
			"--enable-crds=" + strings.Join(kwokCRDs, ","),
			"--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=fake",
			// Pod IPs; the default /24 runs out after 254 pods.
			"--cidr=10.0.0.0/12",
			"--node-ip=127.0.0.1",
			"--node-port=" + strconv.Itoa(p.Kwok),
			"--server-address=127.0.0.1:" + strconv.Itoa(p.Kwok),
		}
	case CompLogsim:
		exe = logsimExe(stateDir)
		args = []string{"logsim", "--state-dir=" + stateDir}
	default:
		return "", nil, fmt.Errorf("unknown component %q", name)
	}
	if exe == "" {
		return "", nil, fmt.Errorf("no binary for %s", name)
	}
	return exe, args, nil
}

// clients are the launcher's API clients, with rate limits raised so thousands of nodes are
// created in seconds.
type clients struct {
	cs  kubernetes.Interface
	dyn dynamic.Interface
}

// RESTConfig loads a kubeconfig file with a generous client-side rate limit.
func RESTConfig(path string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", path, err)
	}
	cfg.QPS = launcherClientQPS
	cfg.Burst = launcherClientBurst
	// Protobuf halves the cost of creating and listing thousands of nodes.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.Timeout = 30 * time.Second
	return cfg, nil
}

func (c *cluster) clients(path string) (*clients, error) {
	cfg, err := RESTConfig(path)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create dynamic client: %w", err)
	}
	return &clients{cs: cs, dyn: dyn}, nil
}

// httpOK reports whether GET url answers 200. The components serve /healthz with their own
// self-signed certificates, and this is a loopback liveness probe, so the certificate is not
// checked.
func httpOK(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

// checkHealthy reports whether the cluster in stateDir is running and ours, or why not.
func checkHealthy(ctx context.Context, stateDir string) (bool, string) {
	if _, err := ReadState(stateDir); err != nil {
		return false, "no complete start recorded"
	}
	byName, errs := pidRecordsByName(stateDir)
	if len(errs) > 0 {
		return false, errors.Join(errs...).Error()
	}
	for _, name := range componentOrder {
		r, ok := byName[name]
		if !ok {
			return false, name + " has no pid file"
		}
		info, alive := ReadProc(r.PID)
		if !alive || !IsOurs(info, r.Exe, stateDir) {
			return false, fmt.Sprintf("%s (pid %d) is not running", name, r.PID)
		}
	}
	cfg, err := RESTConfig(KubeconfigPath(stateDir))
	if err != nil {
		return false, err.Error()
	}
	cfg.Timeout = 5 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false, err.Error()
	}
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return false, fmt.Sprintf("kube-apiserver not ready: %v", err)
	}
	return true, ""
}

// Down stops every process of the cluster in cfg.StateDir and removes the directory.
func Down(ctx context.Context, cfg Config) error {
	if err := cfg.Complete(); err != nil {
		return err
	}
	unlock, err := lockStateParent(ctx, cfg)
	if err != nil {
		return err
	}
	defer unlock()
	return down(cfg, false)
}

// lockStateParent serialises up, down and restart-kwok on one state dir (two `make` targets
// run at once, say). The lock is on the parent directory because the state dir itself comes
// and goes; the parent is the repository root or a test's temp dir.
func lockStateParent(ctx context.Context, cfg Config) (func(), error) {
	parent := filepath.Dir(cfg.StateDir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", parent, err)
	}
	return lockFile(ctx, parent, cfg.Progress)
}

// down stops the processes (by pid file, verified, then by a /proc scan for anything else
// running our binaries against this state dir) and removes the state. keepLogs leaves the
// component logs of a failed start for the user to read.
func down(cfg Config, keepLogs bool) error {
	kind, err := classifyDir(cfg.StateDir)
	if err != nil {
		return err
	}
	switch kind {
	case dirAbsent:
		cfg.logf("no cluster in %s; nothing to stop", cfg.StateDir)
		return nil
	case dirForeign:
		return fmt.Errorf("state directory %s was not made by localcluster; not touching it", cfg.StateDir)
	}
	recs, errs := readPidFiles(cfg.StateDir)
	for _, e := range errs {
		cfg.logf("warning: %v", e)
	}
	byName := map[string]PidRecord{}
	exes := map[string]bool{logsimExe(cfg.StateDir): true}
	for _, r := range recs {
		byName[r.Name] = r
		exes[r.Exe] = true
	}
	for _, v := range []KubeVersion{cfg.KubernetesVersion, runningKubeVersion(cfg.StateDir)} {
		for _, b := range append(Binaries(v), append(NodeBinaries(v), KueueBinary())...) {
			exes[b.Path(cfg.CacheDir)] = true
		}
	}
	// The real node first, while the apiserver still answers: its pods are deleted through it.
	downRealNode(context.Background(), cfg)
	// Kueue first, while the apiserver it talks to is still there.
	for _, name := range append([]string{CompKueue}, reversed(componentOrder)...) {
		if r, ok := byName[name]; ok {
			stopRecord(cfg, r)
		}
	}
	var exeList []string
	for e := range exes {
		exeList = append(exeList, e)
	}
	for _, pid := range findOurProcesses(cfg.StateDir, exeList, ReadProc) {
		cfg.logf("stopping unrecorded process %d that runs against %s", pid, cfg.StateDir)
		stopPid(pid, componentStopGrace, ReadProc)
	}
	if left := findOurProcesses(cfg.StateDir, exeList, ReadProc); len(left) > 0 {
		return fmt.Errorf("processes %v still running after SIGKILL; state kept in %s", left, cfg.StateDir)
	}
	if keepLogs {
		entries, err := os.ReadDir(cfg.StateDir)
		if err != nil {
			return fmt.Errorf("clean state directory: %w", err)
		}
		for _, e := range entries {
			if e.Name() == "logs" || e.Name() == markerFile {
				continue
			}
			if err := os.RemoveAll(filepath.Join(cfg.StateDir, e.Name())); err != nil {
				return fmt.Errorf("clean state directory: %w", err)
			}
		}
		cfg.logf("component logs kept in %s; `localcluster down` removes them", filepath.Join(cfg.StateDir, "logs"))
		return nil
	}
	if err := os.RemoveAll(cfg.StateDir); err != nil {
		return fmt.Errorf("remove state directory %s: %w", cfg.StateDir, err)
	}
	cfg.logf("cluster in %s stopped and removed", cfg.StateDir)
	return nil
}

// stopRecord stops the process of a pid file unless it is gone or the pid now belongs to
// another program.
func stopRecord(cfg Config, r PidRecord) {
	info, alive := ReadProc(r.PID)
	switch {
	case !alive || info.Zombie:
	case !IsOurs(info, r.Exe, cfg.StateDir):
		cfg.logf("%s: pid %d now belongs to another program; not stopping it", r.Name, r.PID)
	default:
		stopPid(r.PID, componentStopGrace, ReadProc)
	}
}

func reversed(names []string) []string {
	out := make([]string, 0, len(names))
	for i := len(names) - 1; i >= 0; i-- {
		out = append(out, names[i])
	}
	return out
}

// onRunning takes the state lock of the cluster in cfg.StateDir, reads its state and opens its
// clients, for the commands that change a running cluster (restart-kwok, kueue-up, kueue-down).
func onRunning(ctx context.Context, cfg Config, do func(c *cluster, admin *clients, st *State) error) error {
	if err := cfg.Complete(); err != nil {
		return err
	}
	unlock, err := lockStateParent(ctx, cfg)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := ReadState(cfg.StateDir)
	if err != nil {
		return err
	}
	c := &cluster{cfg: cfg, ports: st.Ports, bins: st.Binaries}
	admin, err := c.clients(KubeconfigPath(cfg.StateDir))
	if err != nil {
		return err
	}
	return do(c, admin, &st)
}
