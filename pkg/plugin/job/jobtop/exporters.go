package jobtop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/gpumetrics"
)

// How dcgm-exporter is found: the NVIDIA GPU Operator's label and its Helm chart's, in any
// namespace; its metrics port by name, else its default.
var exporterSelectors = []string{"app=nvidia-dcgm-exporter", "app.kubernetes.io/name=dcgm-exporter"}

const (
	exporterPortName = "metrics"
	exporterPort     = 9400
	// OperatorNamespace is where the GPU Operator runs its exporter: read there when pods
	// cannot be listed in every namespace.
	OperatorNamespace = "gpu-operator"
)

// DefaultExporterTimeout bounds one exporter read through the pod proxy: a control plane that
// cannot reach port 9400 (private clusters) would otherwise hold the reading until the API
// server gives up, and nvidia-smi in the ranks answers in its place.
const DefaultExporterTimeout = 5 * time.Second

// DefaultCollectInterval is how often dcgm-exporter collects when its pod does not say
// (its -c / DCGM_EXPORTER_INTERVAL default, 30000 ms).
const DefaultCollectInterval = 30 * time.Second

// exporter is the dcgm-exporter pod on one node and how often it collects.
type exporter struct {
	pod      *corev1.Pod
	interval time.Duration
}

// exporterState is what a Reader keeps of the exporters across the readings of a watch: they
// are looked for once, and again only when a rank runs on a node the last look did not cover
// or a node's exporter pod is gone.
type exporterState struct {
	found  bool
	byNode map[string]exporter
	// looked are the nodes the last look was made for: one of them without an exporter has
	// none, until a new look.
	looked map[string]bool
	// samples is each node's last reading, to tell a new one from a repeat.
	samples map[string]*nodeSample
}

// nodeSample is a node's last exporter reading and when it was first seen.
type nodeSample struct {
	values string
	first  time.Time
}

// nodeScrape is one node's exporter reading.
type nodeScrape struct {
	gpus []gpumetrics.GPU
	err  error
	// sampled is when these values were first read, and repeated whether an earlier reading
	// of the watch showed them: the exporter serves the same reading until its next collect.
	sampled  time.Time
	repeated bool
}

func (r *Reader) exporterTimeout() time.Duration {
	if r.ExporterTimeout > 0 {
		return r.ExporterTimeout
	}
	return DefaultExporterTimeout
}

// exportersFor returns the exporters by node, looking them up when a node of nodes was not
// covered by the last look (the first reading, or a rank that moved to a new node).
func (r *Reader) exportersFor(ctx context.Context, nodes map[string]bool, notes *noteSet) map[string]exporter {
	r.mu.Lock()
	st := &r.exporters
	need := !st.found
	for node := range nodes {
		if _, ok := st.byNode[node]; !ok && !st.looked[node] {
			need = true
		}
	}
	if !need {
		// A copy: a read that finds a pod gone forgets it while the others run.
		out := maps.Clone(st.byNode)
		r.mu.Unlock()
		return out
	}
	r.mu.Unlock()
	pods, err := FindExporters(ctx, r.Client)
	if err != nil {
		notes.gpu(err.Error(), true)
	}
	byNode := make(map[string]exporter, len(pods))
	for node, pod := range pods {
		byNode[node] = exporter{pod: pod, interval: CollectInterval(pod)}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// A failed look is made again at the next reading: it may be an outage.
	st.found = err == nil
	st.byNode = maps.Clone(byNode)
	st.looked = map[string]bool{}
	for node := range nodes {
		st.looked[node] = true
	}
	return byNode
}

// forget drops a node's exporter whose pod is gone, so that the next reading looks again.
func (r *Reader) forget(node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.exporters.byNode, node)
	delete(r.exporters.looked, node)
}

// sampled returns when the node's reading was first seen, and whether it repeats the last one:
// the same values within the exporter's collect interval are the same collect served again.
func (r *Reader) sampled(node string, gpus []gpumetrics.GPU, interval time.Duration, now time.Time) (time.Time, bool) {
	values := strings.Join(describe(gpus), "\n")
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.exporters.samples == nil {
		r.exporters.samples = map[string]*nodeSample{}
	}
	last := r.exporters.samples[node]
	if last != nil && last.values == values && now.Sub(last.first) < interval {
		return last.first, true
	}
	r.exporters.samples[node] = &nodeSample{values: values, first: now}
	return now, false
}

// describe is the values of a reading, pointers followed, to compare two readings.
func describe(gpus []gpumetrics.GPU) []string {
	out := make([]string, 0, len(gpus))
	f := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatFloat(*v, 'g', -1, 64)
	}
	i := func(v *int64) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatInt(*v, 10)
	}
	for _, g := range gpus {
		xid := "-"
		if g.Xid != nil {
			xid = strconv.Itoa(*g.Xid)
		}
		out = append(out, strings.Join([]string{g.UUID, g.MIGInstance, g.Namespace, g.Pod, f(g.Utilization), f(g.GraphicsActive),
			f(g.TensorActive), i(g.MemoryUsedBytes), i(g.MemoryTotalBytes), xid}, " "))
	}
	return out
}

// scrapeNodes reads the exporter on each node through the pod proxy, one request per node,
// each bounded by the exporter timeout.
func (r *Reader) scrapeNodes(ctx context.Context, nodes map[string]bool, notes *noteSet, now time.Time) map[string]nodeScrape {
	out := map[string]nodeScrape{}
	if len(nodes) == 0 {
		return out
	}
	exporters := r.exportersFor(ctx, nodes, notes)
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(r.parallel())
	for node := range nodes {
		ex, ok := exporters[node]
		if !ok {
			continue
		}
		g.Go(func() error {
			gpus, err := r.scrape(ctx, ex.pod)
			s := nodeScrape{gpus: gpus, err: err}
			switch {
			case err == nil:
				s.sampled, s.repeated = r.sampled(node, gpus, ex.interval, now)
			case apierrors.IsNotFound(err):
				// The pod is gone (a DaemonSet replaced it): look again next time.
				r.forget(node)
				notes.gpu(proxyNote(ex.pod, err, 0), true)
			default:
				notes.gpu(proxyNote(ex.pod, err, r.exporterTimeout()), true)
			}
			mu.Lock()
			out[node] = s
			mu.Unlock()
			return nil
		})
	}
	_ = g.Wait() // each node's error is in its scrape
	return out
}

// scrape reads one exporter pod, within the exporter timeout.
func (r *Reader) scrape(parent context.Context, pod *corev1.Pod) ([]gpumetrics.GPU, error) {
	ctx, cancel := context.WithTimeout(parent, r.exporterTimeout())
	defer cancel()
	raw, err := r.Client.CoreV1().Pods(pod.Namespace).ProxyGet("http", pod.Name, fmt.Sprint(metricsPort(pod)), "/metrics", nil).DoRaw(ctx)
	if err != nil {
		if parent.Err() == nil && ctx.Err() != nil {
			return nil, errExporterTimeout
		}
		return nil, err
	}
	return gpumetrics.ParseDCGM(bytes.NewReader(raw))
}

// errExporterTimeout is an exporter read that did not answer within the exporter timeout.
var errExporterTimeout = errors.New("no answer within the exporter timeout")

// FindExporters lists dcgm-exporter's running pods by node: in every namespace, or, where
// that is forbidden, in the GPU Operator's (two lists, or four).
func FindExporters(ctx context.Context, client kubernetes.Interface) (map[string]*corev1.Pod, error) {
	out := map[string]*corev1.Pod{}
	var forbidden error
	for _, sel := range exporterSelectors {
		list, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if apierrors.IsForbidden(err) {
			forbidden = err
			list, err = client.CoreV1().Pods(OperatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		}
		if err != nil {
			if apierrors.IsForbidden(err) {
				continue
			}
			return out, fmt.Errorf("could not look for dcgm-exporter: %v", short(err))
		}
		for i := range list.Items {
			p := &list.Items[i]
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
				out[p.Spec.NodeName] = p
			}
		}
	}
	if len(out) == 0 && forbidden != nil {
		return out, errors.New("could not look for dcgm-exporter: listing pods in every namespace is forbidden, and none runs in namespace " + OperatorNamespace + " (or listing there is forbidden too)")
	}
	return out, nil
}

// metricsPort is the exporter container's port named metrics, else its default.
func metricsPort(pod *corev1.Pod) int32 {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == exporterPortName {
				return p.ContainerPort
			}
		}
	}
	return exporterPort
}

// collectIntervalEnv and the flags below are how dcgm-exporter is told its collect interval,
// in milliseconds.
const collectIntervalEnv = "DCGM_EXPORTER_INTERVAL"

var collectIntervalFlags = []string{"-c", "--c", "-collect-interval", "--collect-interval"}

// CollectInterval is how often the exporter pod collects: its -c / --collect-interval
// argument, else its DCGM_EXPORTER_INTERVAL variable (milliseconds, as the exporter reads
// them), else the exporter's default. A value set from elsewhere (a ConfigMap) cannot be read
// and counts as the default.
func CollectInterval(pod *corev1.Pod) time.Duration {
	for _, c := range pod.Spec.Containers {
		args := append(append([]string(nil), c.Command...), c.Args...)
		for i, a := range args {
			for _, f := range collectIntervalFlags {
				switch {
				case a == f && i+1 < len(args):
					if d, ok := millis(args[i+1]); ok {
						return d
					}
				case strings.HasPrefix(a, f+"="):
					if d, ok := millis(strings.TrimPrefix(a, f+"=")); ok {
						return d
					}
				}
			}
		}
		for _, e := range c.Env {
			if e.Name == collectIntervalEnv && e.ValueFrom == nil {
				if d, ok := millis(e.Value); ok {
					return d
				}
			}
		}
	}
	return DefaultCollectInterval
}

func millis(s string) (time.Duration, bool) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n <= 0 {
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}

// proxyNote says why an exporter could not be read; timeout is the bound a read ran out of.
func proxyNote(pod *corev1.Pod, err error, timeout time.Duration) string {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("reading dcgm-exporter needs get on pods/proxy in namespace %s (`kubectl tao rbac --gpu-metrics` prints a Role)", pod.Namespace)
	case errors.Is(err, errExporterTimeout):
		return fmt.Sprintf("dcgm-exporter pod %s/%s on node %s did not answer within %s (the API server may not reach its port)", pod.Namespace, pod.Name, pod.Spec.NodeName, timeout)
	}
	return fmt.Sprintf("could not read dcgm-exporter pod %s/%s: %v", pod.Namespace, pod.Name, short(err))
}
