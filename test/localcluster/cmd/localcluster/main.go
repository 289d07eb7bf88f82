// Command localcluster builds, starts, inspects and stops the repository's local Kubernetes
// cluster with simulated GPU nodes. See test/localcluster/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kubectl-tao/kubectl-tao/test/localcluster"
)

func main() {
	// containerd runs the launcher as its runc (see runcwrap.go).
	if filepath.Base(os.Args[0]) == localcluster.RuncWrapperName {
		err := localcluster.RunRuncWrapper(os.Args[0], os.Args[1:])
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	var code exitCode
	if errors.As(err, &code) {
		os.Exit(int(code))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "localcluster: %v\n", err)
		os.Exit(1)
	}
}

const usage = `usage: localcluster <command> [flags]

commands:
  build          build the cluster binaries into the cache if missing (--kubectl: and kubectl)
  up             start the cluster (or reuse a healthy one) and wait until it is ready
  down           stop every process of the cluster and remove its state
  kueue-up       install and run Kueue on the running cluster (what up --kueue adds)
  kueue-down     stop Kueue and remove it (CRDs, queues, Workloads) from the running cluster
  gpu-exporter-down
                 remove the real node's dcgm-exporter stand-in pod (for "no exporter" tests)
  gpu-exporter-up
                 run it again (what up does); a running one is left as it is
  relabel        give the last --product-nodes simulated nodes the GPU Feature Discovery labels
                 of --product (a100 or h100), the others the default H100's; prints every
                 node's product; --product-nodes 0 makes them all H100 again
  mig            make the last --mig-nodes simulated nodes advertise nvidia.com/mig-1g.10gb
                 (7 per GPU, the MIG mixed strategy's resource) instead of nvidia.com/gpu;
                 prints every node's GPU resource; --mig-nodes 0 gives them all whole GPUs again
  status         show the components and nodes; exits non-zero unless healthy
  kubeconfig     print the path of the admin kubeconfig
  stop|start|restart COMPONENT
                 stop, start or restart one of etcd, kube-apiserver, kube-controller-manager,
                 kube-scheduler, kwok, keeping its ports, certificates and data (start and
                 restart wait until it is healthy); for fault tests and by hand
  restart-kwok   restart only kwok (node leases are deleted first); same as restart kwok
  images         build the real node's images (OCI archives) into --out
  wrapper        write the wrapper module of --kubernetes-version into --out (default
                 test/localcluster/build/kubernetes-<version>), resolved from the module proxy
  exec -- CMD    run CMD with KUBECONFIG and the real node's TAO_* variables (see README)

Run "localcluster <command> -h" for the flags of a command.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return errors.New("no command given")
		}
		return nil
	}
	cmd, rest := args[0], args[1:]
	// `restart kube-apiserver --state-dir DIR` reads naturally; the flag package stops at the
	// first argument, so the component is taken off the front first.
	var component string
	if isComponentCommand(cmd) && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		component, rest = rest[0], rest[1:]
	}
	fs := flag.NewFlagSet("localcluster "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := localcluster.Config{Progress: stderr}
	fs.StringVar(&cfg.StateDir, "state-dir", ".cluster", "directory holding the running cluster's state, kubeconfig and logs")
	fs.StringVar(&cfg.CacheDir, "cache-dir", "", "binary cache (default ${XDG_CACHE_HOME:-$HOME/.cache}/kubectl-tao/cluster)")
	sourceDir := fs.String("source-dir", "", "repository root holding test/localcluster/build (default: found above the working directory)")
	nodes := fs.Int("nodes", envInt("GPU_NODES", localcluster.DefaultNodes), "number of simulated GPU nodes (env GPU_NODES)")
	gpus := fs.Int("gpus-per-node", envInt("GPUS_PER_NODE", localcluster.DefaultGPUsPerNode), "nvidia.com/gpu per node (env GPUS_PER_NODE)")
	timeout := fs.Duration("timeout", 3*time.Minute, "how long up waits for the nodes to be Ready")
	realNode := realNodeFlag{mode: localcluster.RealNodeOff}
	if v := os.Getenv("REAL_NODE"); v != "" {
		if err := realNode.Set(v); err != nil {
			return err
		}
	}
	fs.Var(&realNode, "real-node", "also run a real kubelet node: 1 (required), auto (where the host allows it) or 0 (env REAL_NODE); needs root on Linux")
	fs.IntVar(&cfg.RealNodeMIGSlices, "real-node-mig-slices", envInt("REAL_NODE_MIG_SLICES", 0), "up: give the real node, beside its "+strconv.Itoa(localcluster.RealNodeGPUs)+" whole GPUs, one GPU in MIG mode cut into this many "+string(localcluster.MIGResource)+" (1 to "+strconv.Itoa(localcluster.MIGSlicesPerGPU)+"; 0: none; env REAL_NODE_MIG_SLICES)")
	fs.DurationVar(&cfg.RealNodeWait, "real-node-wait", 0, "how long up waits for another cluster's real node to go (default 3m with --real-node=1, 0 with auto)")
	fs.BoolVar(&cfg.Kueue, "kueue", os.Getenv("KUEUE") == "1", "up: also install and run Kueue "+localcluster.KueueVersion+"; build: also build it (env KUEUE=1)")
	kubectl := fs.Bool("kubectl", false, "build: also build kubectl of --kubernetes-version (for a machine without one; its path is printed last)")
	kubeVersion := fs.String("kubernetes-version", envString("KUBERNETES_VERSION", localcluster.DefaultKubernetesVersion),
		fmt.Sprintf("Kubernetes release to build and run, any v1.MINOR.PATCH from 1.%d to the default's minor (env KUBERNETES_VERSION)", localcluster.MinKubernetesMinor))
	out := fs.String("out", "", "images: directory to write the archives to (default node-images); wrapper: the module's directory")
	product := fs.String("product", localcluster.GPUProducts[1].Short, "relabel: the GPU product to give some nodes: "+productNames())
	productNodes := fs.Int("product-nodes", 0, "relabel: how many simulated nodes (the last ones) get --product")
	migNodes := fs.Int("mig-nodes", 0, "mig: how many simulated nodes (the last ones) advertise MIG slices instead of whole GPUs")
	gpusFlag := fs.Int("gpus", localcluster.RealNodeGPUs, "deviceplugin: number of GPUs to advertise")
	migSlicesFlag := fs.Int("mig-slices", 0, "deviceplugin: also advertise one more GPU, in MIG mode, cut into this many nvidia.com/mig-1g.10gb slices (0: none)")
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if isComponentCommand(cmd) {
		extra := fs.Args()
		if component == "" && len(extra) > 0 {
			component, extra = extra[0], extra[1:]
		}
		if len(extra) > 0 {
			return fmt.Errorf("%s: unexpected arguments %v", cmd, extra)
		}
		if component == "" {
			return fmt.Errorf("%s: no component given: want one of %s", cmd, strings.Join(localcluster.FaultComponents, ", "))
		}
		if _, err := localcluster.ParseComponent(component); err != nil {
			return fmt.Errorf("%s: %w", cmd, err)
		}
	} else if fs.NArg() > 0 && cmd != "exec" {
		return fmt.Errorf("%s: unexpected arguments %v", cmd, fs.Args())
	}
	if *nodes < 0 || *gpus < 0 {
		return errors.New("GPU_NODES and GPUS_PER_NODE must be non-negative integers")
	}
	v, err := localcluster.ParseKubernetesVersion(*kubeVersion)
	if err != nil {
		return fmt.Errorf("--kubernetes-version: %w", err)
	}
	cfg.KubernetesVersion = v
	cfg.Nodes, cfg.GPUsPerNode, cfg.ReadyTimeout = *nodes, *gpus, *timeout
	cfg.RealNode = realNode.mode
	if !flagSet(fs, "real-node-wait") && cfg.RealNode == localcluster.RealNodeOn {
		cfg.RealNodeWait = 3 * time.Minute
	}
	cfg.SourceDir = *sourceDir
	if cfg.SourceDir == "" {
		// Only a build needs it; a missing repository is reported there if it matters.
		if wd, err := os.Getwd(); err == nil {
			cfg.SourceDir, _ = localcluster.FindSourceDir(wd)
		}
	}
	if exe, err := os.Executable(); err == nil {
		cfg.SelfExe = exe
	}

	switch cmd {
	case "build":
		cacheDir := cfg.CacheDir
		if cacheDir == "" {
			var err error
			if cacheDir, err = localcluster.DefaultCacheDir(); err != nil {
				return err
			}
		}
		buildNode := cfg.RealNode != localcluster.RealNodeOff
		if why := localcluster.RealNodeVersionUnsupported(v); buildNode && why != "" {
			if cfg.RealNode == localcluster.RealNodeOn {
				return errors.New(why)
			}
			fmt.Fprintf(stderr, "localcluster: %s\n", why)
			buildNode = false
		}
		paths, err := localcluster.EnsureBinaries(ctx, v, cacheDir, cfg.SourceDir, stderr)
		if err != nil {
			return err
		}
		list := localcluster.Binaries(v)
		if buildNode {
			// A second build under the same lock: a launcher waiting for the control plane
			// gets it as soon as that part is done.
			nodePaths, err := localcluster.EnsureNodeBinaries(ctx, v, cacheDir, cfg.SourceDir, stderr)
			if err != nil {
				return err
			}
			for k, v := range nodePaths {
				paths[k] = v
			}
			list = append(list, localcluster.NodeBinaries(v)...)
		}
		if cfg.Kueue {
			p, err := localcluster.EnsureKueue(ctx, cacheDir, cfg.SourceDir, stderr)
			if err != nil {
				return err
			}
			paths[localcluster.CompKueue] = p
			list = append(list, localcluster.KueueBinary())
		}
		if *kubectl {
			p, err := localcluster.EnsureKubectl(ctx, v, cacheDir, cfg.SourceDir, stderr)
			if err != nil {
				return err
			}
			paths[localcluster.CompKubectl] = p
			list = append(list, localcluster.KubectlBinary(v))
		}
		for _, b := range list {
			fmt.Fprintf(stdout, "%s\n", paths[b.Name])
		}
		return nil
	case "up":
		return localcluster.Up(ctx, cfg)
	case "down":
		// Teardown must finish even if the user presses Ctrl-C again.
		return localcluster.Down(context.WithoutCancel(ctx), cfg)
	case "kueue-up":
		return localcluster.KueueUp(ctx, cfg)
	case "kueue-down":
		return localcluster.KueueDown(context.WithoutCancel(ctx), cfg)
	case "gpu-exporter-up":
		return localcluster.StartGPUExporter(ctx, cfg)
	case "gpu-exporter-down":
		return localcluster.StopGPUExporter(context.WithoutCancel(ctx), cfg)
	case "relabel":
		nodes, err := localcluster.Relabel(ctx, cfg, *product, *productNodes)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			fmt.Fprintf(stdout, "%s\t%s\n", n.Node, n.Product)
		}
		return nil
	case "mig":
		nodes, err := localcluster.MIG(ctx, cfg, *migNodes)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			fmt.Fprintf(stdout, "%s\t%s\n", n.Node, n.Resource)
		}
		return nil
	case "status":
		return localcluster.Status(ctx, cfg, stdout)
	case "kubeconfig":
		if err := cfg.Complete(); err != nil {
			return err
		}
		fmt.Fprintln(stdout, localcluster.KubeconfigPath(cfg.StateDir))
		return nil
	case "restart-kwok":
		return localcluster.RestartKwok(ctx, cfg)
	case "stop", "start", "restart":
		return localcluster.ControlComponent(ctx, cfg, localcluster.ComponentAction(cmd), component)
	case "images":
		if *out == "" {
			*out = "node-images"
		}
		imgs, err := localcluster.BuildNodeImages(ctx, cfg.SourceDir, *out, stderr)
		if err != nil {
			return err
		}
		for _, role := range []string{localcluster.ImageTest, localcluster.ImageShOnly, localcluster.ImagePause, localcluster.ImageDCGM, localcluster.ImageTorch, localcluster.ImageOpenMPI, localcluster.ImageMPICH, localcluster.ImageOpenMPISSH, localcluster.ImageStager} {
			if img, ok := imgs[role]; ok && img.Archive != "" {
				fmt.Fprintf(stdout, "%s\t%s\n", img.Ref, img.Archive)
			}
		}
		return nil
	case "wrapper":
		dir := *out
		if dir == "" {
			if cfg.SourceDir == "" {
				return errors.New("wrapper: no repository found above the working directory: pass --source-dir or --out")
			}
			dir = filepath.Join(cfg.SourceDir, localcluster.KubeWrapperDir(v))
		}
		if err := localcluster.GenerateKubeWrapper(ctx, v, dir, stderr); err != nil {
			return err
		}
		fmt.Fprintln(stdout, dir)
		return nil
	case "exec":
		if fs.NArg() == 0 {
			return errors.New("exec: no command given (localcluster exec --state-dir DIR -- CMD ARGS...)")
		}
		if err := cfg.Complete(); err != nil {
			return err
		}
		env, err := localcluster.TestEnv(cfg.StateDir)
		if err != nil {
			return err
		}
		c := exec.CommandContext(ctx, fs.Arg(0), fs.Args()[1:]...)
		c.Env = append(os.Environ(), env...)
		c.Stdin, c.Stdout, c.Stderr = os.Stdin, stdout, stderr
		err = c.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() > 0 {
			return exitCode(ee.ExitCode())
		}
		return err
	case "deviceplugin":
		// Hidden: the real node's GPU device plugin, which up starts.
		return localcluster.RunDevicePlugin(ctx, cfg.StateDir, *gpusFlag, *migSlicesFlag, stderr)
	case "logsim":
		// Hidden: the log daemon the launcher starts.
		return runLogsim(ctx, cfg.StateDir, stderr)
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}

// isComponentCommand reports whether cmd takes a COMPONENT argument.
func isComponentCommand(cmd string) bool {
	return cmd == "stop" || cmd == "start" || cmd == "restart"
}

func runLogsim(ctx context.Context, stateDir string, stderr io.Writer) error {
	return localcluster.RunLogsim(ctx, stateDir, stderr)
}

// productNames lists the products relabel knows, by their short names.
func productNames() string {
	names := make([]string, len(localcluster.GPUProducts))
	for i, p := range localcluster.GPUProducts {
		names[i] = p.Short
	}
	return strings.Join(names, ", ")
}

// envString reads a string knob from the environment.
func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// envInt reads an integer knob from the environment; a malformed value is reported by making
// the flag default invalid rather than silently ignored.
func envInt(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return n
}

// realNodeFlag is --real-node: a bare --real-node means 1.
type realNodeFlag struct{ mode localcluster.RealNodeMode }

func (f *realNodeFlag) String() string   { return string(f.mode) }
func (f *realNodeFlag) IsBoolFlag() bool { return true }
func (f *realNodeFlag) Set(s string) error {
	m, err := localcluster.ParseRealNodeMode(s)
	if err != nil {
		return err
	}
	f.mode = m
	return nil
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// exitCode is the exit status of the command `exec` ran, passed on as the launcher's own.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }
