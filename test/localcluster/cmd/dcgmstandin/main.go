// Command dcgmstandin is the real node's dcgm-exporter (image local/dcgm-exporter:1), run by
// the launcher as a pod in gpu-operator the way the GPU Operator runs its exporter. At each
// scrape of /metrics it asks the kubelet's PodResources API which container holds which
// nvidia.com/gpu device, as dcgm-exporter does with DCGM_EXPORTER_KUBERNETES=true, and reads
// each holder's values from the host directory tests write (GPUMetricsDir), since the node
// has no GPU to measure. Built static (CGO_ENABLED=0).
package main

import (
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
	flag.Parse()
	// dcgm-exporter in Kubernetes names the node from NODE_NAME, else the pod's hostname.
	hostname := os.Getenv("NODE_NAME")
	if hostname == "" {
		hostname, _ = os.Hostname()
	}
	e := &exporter{gpus: gpustandin.NodeGPUs(gpustandin.SplitIDs(*gpus)), socket: *socket, valuesDir: *valuesDir, hostname: hostname}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", e.metrics)
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("OK")) })
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Printf("dcgm-exporter stand-in: %d GPUs on %s, serving %s", len(e.gpus), hostname, *addr)
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

type exporter struct {
	gpus      []gpustandin.GPU
	socket    string
	valuesDir string
	hostname  string
}

func (e *exporter) metrics(w http.ResponseWriter, r *http.Request) {
	holders, err := e.listHolders(r.Context())
	if err != nil {
		// As dcgm-exporter: a failed lookup costs the pod labels, not the scrape.
		log.Printf("failed to get pod mappings: %v", err)
	}
	devs := make([]gpustandin.DeviceState, len(e.gpus))
	for i, g := range e.gpus {
		devs[i] = gpustandin.DeviceState{GPU: g}
		if h, ok := holders[g.UUID]; ok {
			devs[i].Holder = &h
			data, _ := os.ReadFile(filepath.Join(e.valuesDir, h.Namespace, h.Pod)) // missing: idle
			devs[i].Values = gpustandin.ParseValues(data)
		}
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	if err := gpustandin.RenderDCGM(w, e.hostname, devs); err != nil {
		log.Printf("write /metrics: %v", err)
	}
}

// listHolders maps device ID to the container holding it, from one PodResources List over a
// fresh connection per scrape, as dcgm-exporter does.
func (e *exporter) listHolders(ctx context.Context) (map[string]gpustandin.Holder, error) {
	conn, err := grpc.NewClient("passthrough:///"+e.socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", addr)
		}))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", e.socket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list pod resources: %w", err)
	}
	return holdersFrom(resp), nil
}

// holdersFrom maps each nvidia.com/gpu device ID (a GPU UUID) in a List answer to its
// container; devices of other resources get no pod labels, as in dcgm-exporter.
func holdersFrom(resp *podresourcesapi.ListPodResourcesResponse) map[string]gpustandin.Holder {
	out := map[string]gpustandin.Holder{}
	for _, pod := range resp.GetPodResources() {
		for _, c := range pod.GetContainers() {
			for _, d := range c.GetDevices() {
				if d.GetResourceName() != gpustandin.GPUResource {
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
