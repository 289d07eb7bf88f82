package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Versions of the upstream parts. They must match the wrapper modules under build/. The
// Kubernetes release is chosen per cluster (KubeVersion; DefaultKubernetesVersion).
const (
	EtcdVersion = "v3.6.16"
	KwokVersion = "v0.8.0"
	// The real node's parts (--real-node).
	ContainerdVersion = "v2.4.2"
	RuncVersion       = "v1.5.3"
	CNIPluginsVersion = "v1.10.0"
	CoreDNSVersion    = "v1.15.0"
)

// Component names, used for binaries, pid files and log files.
const (
	CompEtcd              = "etcd"
	CompAPIServer         = "kube-apiserver"
	CompControllerManager = "kube-controller-manager"
	CompScheduler         = "kube-scheduler"
	CompKwok              = "kwok"
	CompLogsim            = "logsim"
	// CompKubectl is no component: kubectl for the tests, where the machine has none.
	CompKubectl = "kubectl"
	// The real node's processes and binaries.
	CompKubelet      = "kubelet"
	CompContainerd   = "containerd"
	CompCtr          = "ctr"
	CompShim         = "containerd-shim-runc-v2"
	CompRunc         = "runc"
	CompCNIBridge    = "bridge"
	CompCNIHostLocal = "host-local"
	CompCNILoopback  = "loopback"
	CompCoreDNS      = "coredns"
)

// Binary is one upstream executable built from a wrapper module under build/.
type Binary struct {
	Name    string
	Version string
	// CacheKey names the cache subdirectory, <component>-<version>.
	CacheKey string
	// Module is the wrapper module directory, relative to the repository root.
	Module  string
	Package string
	LDFlags string
	// Tags are the build tags, space separated.
	Tags string
	// CGO is CGO_ENABLED for the build; empty inherits the environment, as the control plane
	// always has (cgo on where a C compiler is), which the kubelet must match to share its
	// build cache.
	CGO string
	// Kube is the Kubernetes release of a binary built from a Kubernetes wrapper module (zero
	// for the others): its module is the committed one or one generated into the cache
	// (EnsureKubeWrapper), and where the machine's Go cannot build it, the release's Go can.
	Kube KubeVersion
}

// Binaries lists every upstream binary in build order (cheapest first, so a broken toolchain
// shows up in a minute rather than after the eight-minute apiserver).
func Binaries(v KubeVersion) []Binary {
	return []Binary{
		{Name: CompEtcd, Version: EtcdVersion, CacheKey: "etcd-" + EtcdVersion, Module: "test/localcluster/build/etcd", Package: "go.etcd.io/etcd/server/v3", LDFlags: "-s -w"},
		{Name: CompKwok, Version: KwokVersion, CacheKey: "kwok-" + KwokVersion, Module: "test/localcluster/build/kwok", Package: "sigs.k8s.io/kwok/cmd/kwok", LDFlags: "-s -w"},
		kubeBinary(CompAPIServer, v),
		kubeBinary(CompControllerManager, v),
		kubeBinary(CompScheduler, v),
	}
}

// kubeBinary is command name of Kubernetes release v, built from its wrapper module into the
// release's cache directory kubernetes-<version>.
func kubeBinary(name string, v KubeVersion) Binary {
	return Binary{Name: name, Version: v.String(), CacheKey: "kubernetes-" + v.String(), Module: KubeWrapperDir(v),
		Package: "k8s.io/kubernetes/cmd/" + name, LDFlags: v.LDFlags(), Kube: v}
}

// NodeBinaries lists the real node's binaries (--real-node), cheapest first. The kubelet comes
// from the control plane's wrapper module with its exact settings, so the two share the Go build
// cache; containerd, runc and the CNI plugins have no replace directives and are installed as
// released (Module empty: `go install Package@Version`), with upstream's build tags minus the
// ones this host cannot satisfy (runc: no seccomp, which needs libseccomp headers).
func NodeBinaries(v KubeVersion) []Binary {
	ctrd := "containerd-" + ContainerdVersion
	cni := "cni-plugins-" + CNIPluginsVersion
	ctrdLD := "-s -w -X github.com/containerd/containerd/v2/version.Version=" + ContainerdVersion
	ctrdTags := "urfave_cli_no_docs no_btrfs no_devmapper no_zfs"
	return []Binary{
		{Name: CompRunc, Version: RuncVersion, CacheKey: "runc-" + RuncVersion, Package: "github.com/opencontainers/runc", LDFlags: "-s -w -X main.version=" + strings.TrimPrefix(RuncVersion, "v"), Tags: "urfave_cli_no_docs", CGO: "1"},
		{Name: CompCNIBridge, Version: CNIPluginsVersion, CacheKey: cni, Package: "github.com/containernetworking/plugins/plugins/main/bridge", LDFlags: "-s -w", CGO: "0"},
		{Name: CompCNIHostLocal, Version: CNIPluginsVersion, CacheKey: cni, Package: "github.com/containernetworking/plugins/plugins/ipam/host-local", LDFlags: "-s -w", CGO: "0"},
		{Name: CompCNILoopback, Version: CNIPluginsVersion, CacheKey: cni, Package: "github.com/containernetworking/plugins/plugins/main/loopback", LDFlags: "-s -w", CGO: "0"},
		{Name: CompShim, Version: ContainerdVersion, CacheKey: ctrd, Package: "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2", LDFlags: ctrdLD, Tags: "urfave_cli_no_docs no_grpc", CGO: "0"},
		{Name: CompCtr, Version: ContainerdVersion, CacheKey: ctrd, Package: "github.com/containerd/containerd/v2/cmd/ctr", LDFlags: ctrdLD, Tags: ctrdTags, CGO: "0"},
		{Name: CompContainerd, Version: ContainerdVersion, CacheKey: ctrd, Package: "github.com/containerd/containerd/v2/cmd/containerd", LDFlags: ctrdLD, Tags: ctrdTags, CGO: "0"},
		{Name: CompCoreDNS, Version: CoreDNSVersion, CacheKey: "coredns-" + CoreDNSVersion, Module: "test/localcluster/build/coredns", Package: "github.com/kubectl-tao/kubectl-tao/test/localcluster/build/coredns", LDFlags: "-s -w", CGO: "0"},
		kubeBinary(CompKubelet, v),
	}
}

// KubectlBinary is kubectl of the cluster's Kubernetes version, for a machine without one
// (`localcluster build --kubectl`; `make e2e` puts it on PATH then). It comes from the control
// plane's wrapper module with its settings, sharing its build cache, into a cache directory of
// its own so that only kubectl goes on PATH.
func KubectlBinary(v KubeVersion) Binary {
	b := kubeBinary(CompKubectl, v)
	b.CacheKey = CompKubectl + "-" + v.String()
	return b
}

// EnsureKubectl returns the path of KubectlBinary, building it if missing.
func EnsureKubectl(ctx context.Context, v KubeVersion, cacheDir, sourceDir string, progress io.Writer) (string, error) {
	paths, err := ensureBinaries(ctx, cacheDir, sourceDir, []Binary{KubectlBinary(v)}, progress)
	if err != nil {
		return "", err
	}
	return paths[CompKubectl], nil
}

// Path is where the finished binary lives in the cache.
func (b Binary) Path(cacheDir string) string {
	return filepath.Join(cacheDir, b.CacheKey, b.Name)
}

// DefaultCacheDir is ${XDG_CACHE_HOME:-$HOME/.cache}/kubectl-tao/cluster: outside the
// repository so a fresh clone or `git clean` never costs another 13-minute build.
func DefaultCacheDir() (string, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("locate the binary cache: neither XDG_CACHE_HOME nor HOME is set: %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "kubectl-tao", "cluster"), nil
}

// FindSourceDir walks up from start to the repository root, recognised by the wrapper
// modules the build needs.
func FindSourceDir(start string) (string, error) {
	dir, err := filepath.Abs(start)
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", start, err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, KubeWrapperDir(DefaultKubeVersion()), "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no kubectl-tao repository (test/localcluster/build) above %s; run from inside the repository or pass --source-dir", start)
		}
		dir = parent
	}
}

// stamp records the size and modification time of a binary that has been seen to run, so
// later starts can trust it without exec'ing it, while a truncated or replaced file is caught.
type stamp struct {
	Size    int64     `json:"size"`
	ModTime time.Time `json:"modTime"`
}

func stampPath(bin string) string { return bin + ".ok" }

func readStamp(bin string) (stamp, bool) {
	data, err := os.ReadFile(stampPath(bin))
	if err != nil {
		return stamp{}, false
	}
	var s stamp
	if json.Unmarshal(data, &s) != nil {
		return stamp{}, false
	}
	return s, true
}

func writeStamp(bin string) error {
	fi, err := os.Stat(bin)
	if err != nil {
		return fmt.Errorf("stat %s: %w", bin, err)
	}
	data, err := json.Marshal(stamp{Size: fi.Size(), ModTime: fi.ModTime().UTC()})
	if err != nil {
		return fmt.Errorf("encode stamp for %s: %w", bin, err)
	}
	if err := os.WriteFile(stampPath(bin), data, 0o644); err != nil {
		return fmt.Errorf("write stamp for %s: %w", bin, err)
	}
	return nil
}

// binaryUsable reports whether the cached binary can be used as is. A binary without a stamp
// (copied in, or built by an older launcher) is trusted once it answers --version.
func binaryUsable(ctx context.Context, bin string) (bool, string) {
	fi, err := os.Stat(bin)
	if err != nil {
		return false, "missing"
	}
	if fi.Mode()&0o111 == 0 || fi.Size() == 0 {
		return false, "not an executable file"
	}
	if s, ok := readStamp(bin); ok && s.Size == fi.Size() && s.ModTime.Equal(fi.ModTime().UTC()) {
		return true, ""
	}
	vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(vctx, bin, "--version").CombinedOutput(); err != nil {
		return false, fmt.Sprintf("does not run (%v: %s)", err, strings.TrimSpace(string(out)))
	}
	if err := writeStamp(bin); err != nil {
		return false, err.Error()
	}
	return true, ""
}

// EnsureBinaries returns the path of every binary, building the missing ones. Builds write to a
// temporary name and rename into place, so an interrupted build never leaves a binary that
// looks finished; a lock keeps two launchers (parallel test packages) from building twice.
func EnsureBinaries(ctx context.Context, v KubeVersion, cacheDir, sourceDir string, progress io.Writer) (map[string]string, error) {
	return ensureBinaries(ctx, cacheDir, sourceDir, Binaries(v), progress)
}

// EnsureNodeBinaries is EnsureBinaries for the real node's binaries. It is a separate build
// under the same lock, so a launcher that only needs the control plane never waits for it.
func EnsureNodeBinaries(ctx context.Context, v KubeVersion, cacheDir, sourceDir string, progress io.Writer) (map[string]string, error) {
	return ensureBinaries(ctx, cacheDir, sourceDir, NodeBinaries(v), progress)
}

func ensureBinaries(ctx context.Context, cacheDir, sourceDir string, list []Binary, progress io.Writer) (map[string]string, error) {
	paths := map[string]string{}
	var missing []Binary
	for _, b := range list {
		p := b.Path(cacheDir)
		paths[b.Name] = p
		if ok, _ := binaryUsable(ctx, p); !ok {
			missing = append(missing, b)
		}
	}
	if len(missing) == 0 {
		return paths, nil
	}
	if sourceDir == "" {
		return nil, fmt.Errorf("%d cluster binaries missing from %s and no source directory to build them from: run from inside the kubectl-tao repository or pass --source-dir", len(missing), cacheDir)
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("create binary cache %s: %w", cacheDir, err)
	}
	unlock, err := lockFile(ctx, filepath.Join(cacheDir, ".build.lock"), progress)
	if err != nil {
		return nil, err
	}
	defer unlock()
	for _, b := range missing {
		p := b.Path(cacheDir)
		// Another launcher may have built it while we waited for the lock.
		ok, why := binaryUsable(ctx, p)
		if ok {
			continue
		}
		if why != "missing" {
			fmt.Fprintf(progress, "localcluster: cached %s %s %s; rebuilding\n", b.Name, b.Version, why)
		}
		if err := buildBinary(ctx, b, cacheDir, sourceDir, progress); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

func buildBinary(ctx context.Context, b Binary, cacheDir, sourceDir string, progress io.Writer) error {
	dst := b.Path(cacheDir)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("create cache directory for %s: %w", b.Name, err)
	}
	// Leftovers of an interrupted build are never used; clear them so they do not pile up.
	if olds, _ := filepath.Glob(dst + ".tmp*"); len(olds) > 0 {
		for _, o := range olds {
			_ = os.Remove(o)
		}
	}
	dir := filepath.Join(sourceDir, b.Module)
	if !b.Kube.IsZero() {
		var err error
		if dir, err = EnsureKubeWrapper(ctx, b.Kube, cacheDir, sourceDir, progress); err != nil {
			return err
		}
	}
	tmp := fmt.Sprintf("%s.tmp%d", dst, os.Getpid())
	fmt.Fprintf(progress, "localcluster: building %s %s into %s (once per machine and release; a cold Kubernetes release takes ~15-30 min on 2 cores, the real node's parts another ~17)\n", b.Name, b.Version, filepath.Dir(dst))
	start := time.Now()
	// The cluster is test scaffolding, built with the machine's Go (GOTOOLCHAIN=local, not the
	// Makefile's plugin release) and cached by component version alone. A Kubernetes release
	// it cannot build is retried with the Go the release names, remembered for its other
	// binaries.
	toolchain := "local"
	if data, err := os.ReadFile(toolchainFile(b, cacheDir)); err == nil && !b.Kube.IsZero() {
		toolchain = strings.TrimSpace(string(data))
	}
	err := goBuild(ctx, b, dir, tmp, toolchain, start, progress)
	if err != nil && toolchain == "local" && !b.Kube.IsZero() && ctx.Err() == nil {
		tc, terr := releaseToolchain(ctx, dir, b.Kube)
		if terr != nil {
			return fmt.Errorf("%w (and no Go release to retry with: %v)", err, terr)
		}
		fmt.Fprintf(progress, "localcluster: %s %s does not build with %s; retrying with %s, the Go its go.mod names\n", b.Name, b.Version, localGoVersion(ctx), tc)
		toolchain = tc
		if err = goBuild(ctx, b, dir, tmp, toolchain, start, progress); err == nil {
			_ = os.WriteFile(toolchainFile(b, cacheDir), []byte(tc+"\n"), 0o644)
		}
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("move built %s into the cache: %w", b.Name, err)
	}
	if err := writeStamp(dst); err != nil {
		return err
	}
	built := "the machine's Go"
	if toolchain != "local" {
		built = toolchain
	} else if !b.Kube.IsZero() {
		built = localGoVersion(ctx)
	}
	fmt.Fprintf(progress, "localcluster: built %s %s with %s in %s\n", b.Name, b.Version, built, time.Since(start).Round(time.Second))
	return nil
}

// goBuild builds b from the module in dir into tmp with GOTOOLCHAIN=toolchain.
func goBuild(ctx context.Context, b Binary, dir, tmp, toolchain string, start time.Time, progress io.Writer) error {
	args := []string{"build", "-trimpath", "-ldflags", b.LDFlags}
	if b.Tags != "" {
		args = append(args, "-tags", b.Tags)
	}
	// The wrapper modules are self-contained: a GOFLAGS=-modfile or a go.work meant for the
	// plugin must not leak into them.
	env := append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN="+toolchain)
	var installDir string
	if b.Module == "" {
		// A released module built as released: `go install pkg@version` resolves it with its own
		// go.mod, checked against the checksum database. go install has no -o, so it installs
		// into a private directory and the binary is moved from there.
		var err error
		if installDir, err = os.MkdirTemp(filepath.Dir(tmp), ".install"); err != nil {
			return fmt.Errorf("create build directory for %s: %w", b.Name, err)
		}
		defer os.RemoveAll(installDir)
		args[0] = "install"
		args = append(args, b.Package+"@"+b.Version)
		env = append(env, "GOFLAGS=", "GOBIN="+installDir)
	} else {
		args = append(args, "-o", tmp, b.Package)
		env = append(env, "GOFLAGS=-mod=readonly")
	}
	if b.CGO != "" {
		env = append(env, "CGO_ENABLED="+b.CGO)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = progress
	cmd.Stderr = progress
	stop := make(chan struct{})
	go ticker(progress, b.Name, start, stop)
	err := cmd.Run()
	close(stop)
	if err == nil && installDir != "" {
		err = os.Rename(filepath.Join(installDir, b.Name), tmp)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("build %s %s in %s (GOTOOLCHAIN=%s): %w", b.Name, b.Version, dir, toolchain, err)
	}
	return nil
}

// lockFile takes an exclusive flock on path (a file, created if needed, or a directory),
// telling the user if it has to wait.
func lockFile(ctx context.Context, path string, progress io.Writer) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if errors.Is(err, syscall.EISDIR) {
		f, err = os.Open(path)
	}
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !told {
			fmt.Fprintf(progress, "localcluster: another localcluster holds a lock on %s; waiting for it\n", path)
			told = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for lock %s: %w", path, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}
