// Command dcgmstandin is the real node's dcgm-exporter (image local/dcgm-exporter:1), run by
// the launcher as a pod in gpu-operator the way the GPU Operator runs its exporter. Every
// collect interval (-c milliseconds, or DCGM_EXPORTER_INTERVAL; 30000 by default, as the real
// exporter's) it asks the kubelet's PodResources API which container holds which
// nvidia.com/gpu device, as dcgm-exporter does with DCGM_EXPORTER_KUBERNETES=true, and reads
// each holder's values from the host directory tests write (GPUMetricsDir), since the node
// has no GPU to measure; /metrics serves the last collect, as the real exporter does. With
// --mig-slices N the GPUs of --mig-gpus (every GPU without it) are in MIG mode, each cut into N
// slices of --mig-profile, served as dcgm-exporter serves MIG devices and mapped from the
// profile's resource (nvidia.com/mig-PROFILE), whose device IDs are the slices' MIG UUIDs; the
// other GPUs stay whole, as on a node of the MIG mixed strategy. Built static (CGO_ENABLED=0).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kubectl-tao/kubectl-tao/test/localcluster/gpustandin"
)

func main() {
	gpus := flag.String("gpus", "", "the node's GPU UUIDs (device plugin IDs), comma separated, in index order")
	socket := flag.String("pod-resources-socket", "/var/lib/kubelet/pod-resources/kubelet.sock", "the kubelet's PodResources socket")
	valuesDir := flag.String("values-dir", "/run/gpu-metrics", "directory of NAMESPACE/POD values files")
	addr := flag.String("address", envOr("DCGM_EXPORTER_LISTEN", ":9400"), "listen address (env DCGM_EXPORTER_LISTEN)")
	every := flag.Int("c", 30000, "collect interval in milliseconds (env DCGM_EXPORTER_INTERVAL)")
	migProfile := flag.String("mig-profile", gpustandin.MIGProfile, "with --mig-slices: the MIG profile the GPUs are cut into")
	migSlices := flag.Int("mig-slices", 0, "slices per GPU in MIG mode (0: whole GPUs)")
	migGPUs := flag.String("mig-gpus", "", "with --mig-slices: the UUIDs of the GPUs in MIG mode, comma separated (default every GPU)")
	flag.Parse()
	interval, err := collectInterval(*every, os.Getenv("DCGM_EXPORTER_INTERVAL"), isSet("c"))
	if err != nil {
		log.Fatal(err)
	}
	// dcgm-exporter in Kubernetes names the node from NODE_NAME, else the pod's hostname.
	hostname := os.Getenv("NODE_NAME")
	if hostname == "" {
		hostname, _ = os.Hostname()
	}
	devices, resources, err := nodeDevices(gpustandin.NodeGPUs(gpustandin.SplitIDs(*gpus)), gpustandin.SplitIDs(*migGPUs), *migProfile, *migSlices)
	if err != nil {
		log.Fatal(err)
	}
	e := &exporter{devices: devices, valuesDir: *valuesDir, hostname: hostname}
	e.holders = func(ctx context.Context) (map[string]gpustandin.Holder, error) {
		return listHolders(ctx, *socket, resources)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The first collect before listening: a scrape never finds nothing to serve.
	e.collect(ctx)
	go e.run(ctx, interval)
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", e.metrics)
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("OK")) })
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Printf("dcgm-exporter stand-in: %d devices of %s on %s, collecting every %s, serving %s", len(e.devices), strings.Join(resources, ", "), hostname, interval, *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// isSet reports whether the flag was given on the command line.
func isSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// collectInterval is the -c flag when given, else DCGM_EXPORTER_INTERVAL when set, else the
// flag's default, as the real exporter reads them; in milliseconds, more than 0.
func collectInterval(flagMillis int, env string, flagSet bool) (time.Duration, error) {
	ms := flagMillis
	if !flagSet && env != "" {
		n, err := strconv.Atoi(env)
		if err != nil {
			return 0, fmt.Errorf("DCGM_EXPORTER_INTERVAL=%q is not a number of milliseconds", env)
		}
		ms = n
	}
	if ms <= 0 {
		return 0, fmt.Errorf("the collect interval must be more than 0 ms, got %d", ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// device is one device the exporter serves: a GPU, or a MIG slice of one, and the device ID
// the kubelet knows it by.
type device struct {
	id    string
	state gpustandin.DeviceState
}

// nodeDevices are the node's devices and the resources they are mapped from: the GPUs, and
// with perGPU > 0 each GPU of migGPUs (every GPU when it is empty) cut into that many slices
// of profile instead of whole.
func nodeDevices(gpus []gpustandin.GPU, migGPUs []string, profile string, perGPU int) ([]device, []string, error) {
	var whole, cut []gpustandin.GPU
	for _, g := range gpus {
		if perGPU > 0 && (len(migGPUs) == 0 || slices.Contains(migGPUs, g.UUID)) {
			cut = append(cut, g)
		} else {
			whole = append(whole, g)
		}
	}
	for _, id := range migGPUs {
		if !slices.ContainsFunc(gpus, func(g gpustandin.GPU) bool { return g.UUID == id }) {
			return nil, nil, fmt.Errorf("--mig-gpus names %s, which is not one of --gpus", id)
		}
	}
	var out []device
	var resources []string
	if len(whole) > 0 {
		resources = append(resources, gpustandin.GPUResource)
		for _, g := range whole {
			out = append(out, device{id: g.UUID, state: gpustandin.DeviceState{GPU: g}})
		}
	}
	if len(cut) > 0 {
		migs, err := gpustandin.MIGDevices(cut, profile, perGPU)
		if err != nil {
			return nil, nil, err
		}
		resources = append(resources, gpustandin.MIGResourcePrefix+profile)
		for i, m := range migs {
			out = append(out, device{id: m.ID, state: gpustandin.DeviceState{GPU: m.GPU, Slice: &migs[i].MIGSlice}})
		}
	}
	return out, resources, nil
}

type exporter struct {
	devices   []device
	valuesDir string
	hostname  string
	// holders maps each device ID to the container holding it (the kubelet's PodResources).
	holders func(context.Context) (map[string]gpustandin.Holder, error)

	mu   sync.RWMutex
	page []byte // the last collect's /metrics text
}

// run collects every interval until ctx ends.
func (e *exporter) run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			e.collect(ctx)
		}
	}
}

// collect reads who holds each GPU and what it shows, and keeps the text /metrics serves
// until the next collect.
func (e *exporter) collect(ctx context.Context) {
	holders, err := e.holders(ctx)
	if err != nil {
		// As dcgm-exporter: a failed lookup costs the pod labels, not the collect.
		log.Printf("failed to get pod mappings: %v", err)
	}
	devs := make([]gpustandin.DeviceState, len(e.devices))
	for i, d := range e.devices {
		devs[i] = d.state
		if h, ok := holders[d.id]; ok {
			devs[i].Holder = &h
			data, _ := os.ReadFile(filepath.Join(e.valuesDir, h.Namespace, h.Pod)) // missing: idle
			devs[i].Values = gpustandin.ParseValues(data)
		}
	}
	var buf bytes.Buffer
	if err := gpustandin.RenderDCGM(&buf, e.hostname, devs); err != nil {
		log.Printf("render /metrics: %v", err)
		return
	}
	e.mu.Lock()
	e.page = buf.Bytes()
	e.mu.Unlock()
}

func (e *exporter) metrics(w http.ResponseWriter, _ *http.Request) {
	e.mu.RLock()
	page := e.page
	e.mu.RUnlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	if _, err := w.Write(page); err != nil {
		log.Printf("write /metrics: %v", err)
	}
}

// listHolders maps device ID to the container holding it, from one PodResources List over a
// fresh connection per collect, as dcgm-exporter does.
func listHolders(ctx context.Context, socket string, resources []string) (map[string]gpustandin.Holder, error) {
	conn, err := grpc.NewClient("passthrough:///"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", addr)
		}))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", socket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list pod resources: %w", err)
	}
	return holdersFrom(resp, resources), nil
}

// holdersFrom maps each device ID of resources (a GPU UUID, a slice's MIG UUID) in a List
// answer to its container; devices of other resources get no pod labels, as in dcgm-exporter.
func holdersFrom(resp *podresourcesapi.ListPodResourcesResponse, resources []string) map[string]gpustandin.Holder {
	out := map[string]gpustandin.Holder{}
	for _, pod := range resp.GetPodResources() {
		for _, c := range pod.GetContainers() {
			for _, d := range c.GetDevices() {
				if !slices.Contains(resources, d.GetResourceName()) {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					out[id] = gpustandin.Holder{Namespace: pod.GetNamespace(), Pod: pod.GetName(), Container: c.GetName()}
				}
			}
		}
	}
	return out
}
