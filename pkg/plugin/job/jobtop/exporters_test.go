package jobtop

import (
	"context"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

// silentProxy is an exporter read that never answers: it ends only with its context, as an
// HTTP request through an API server that cannot reach the pod does.
type silentProxy struct{}

func (silentProxy) DoRaw(ctx context.Context) ([]byte, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (silentProxy) Stream(ctx context.Context) (io.ReadCloser, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// An exporter that never answers costs one exporter timeout, and its node's rank reads
// nvidia-smi instead; the note names the node once.
func TestReadSilentExporterFallsBackWithinTimeout(t *testing.T) {
	tgt := twoRankJob(t)
	cs := fake.NewClientset(exporterPod("dcgm-a", "gpu-operator", "node-a", map[string]string{"app": "nvidia-dcgm-exporter"}))
	cs.AddProxyReactor("pods", func(k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
		return true, silentProxy{}, nil
	})
	ex := &fakeExec{smi: map[string]string{"train-0": "0, GPU-a0, 90, 1000, 81559\n", "train-1": "0, GPU-b0, 91, 1000, 81559\n"}}
	const bound = 300 * time.Millisecond
	r := &Reader{Client: cs, Exec: ex, ExporterTimeout: bound}
	begin := time.Now()
	got := r.Read(context.Background(), []Target{tgt}, time.Now())[0]
	if took := time.Since(begin); took > bound+2*time.Second {
		t.Errorf("the reading took %s with an exporter timeout of %s", took, bound)
	}
	if got.Ranks[0].MetricsSource != SourceNvidiaSMI || *got.Ranks[0].GPUs[0].Utilization != 90 {
		t.Errorf("rank 0 (node with the silent exporter): %+v", got.Ranks[0])
	}
	want := "dcgm-exporter pod gpu-operator/dcgm-a on node node-a did not answer within 300ms (the API server may not reach its port); using nvidia-smi in the ranks instead"
	if len(got.Notes) != 1 || got.Notes[0] != want {
		t.Errorf("notes %q\nwant %q", got.Notes, want)
	}
	if got.Unreachable != nil {
		t.Errorf("a silent exporter is no API-server outage: %v", got.Unreachable)
	}
}

// A watch looks for the exporters once, and again only when a rank runs on a node the last
// look did not cover, or an exporter pod is gone.
func TestExportersFoundOncePerWatch(t *testing.T) {
	tgt := twoRankJob(t) // ranks on node-a (exporter) and node-b (none)
	cs := fake.NewClientset(exporterPod("dcgm-a", "gpu-operator", "node-a", map[string]string{"app": "nvidia-dcgm-exporter"}))
	var lists atomic.Int32
	cs.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		lists.Add(1)
		return false, nil, nil
	})
	var gone atomic.Bool
	cs.AddProxyReactor("pods", func(k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
		if gone.Load() {
			return true, proxyErr{apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "dcgm-a")}, nil
		}
		return true, proxyBody(scrape), nil
	})
	r := &Reader{Client: cs, Exec: &fakeExec{smi: map[string]string{"train-1": "0, GPU-b0, 91, 1000, 81559\n"}}, Watching: true}
	now := time.Now()
	for i := range 3 {
		r.Read(context.Background(), []Target{tgt}, now.Add(time.Duration(i)*time.Second))
	}
	if n := lists.Load(); n != 2 {
		t.Errorf("%d pod lists in three readings, want the 2 of one look (one per selector)", n)
	}
	// Rank 1 moves to node-c.
	tgt.Pods[1].Spec.NodeName = "node-c"
	r.Read(context.Background(), []Target{tgt}, now.Add(3*time.Second))
	if n := lists.Load(); n != 4 {
		t.Errorf("%d pod lists after a rank moved to a new node, want 4", n)
	}
	// node-a's exporter pod is gone: the next reading looks again.
	gone.Store(true)
	r.Read(context.Background(), []Target{tgt}, now.Add(4*time.Second))
	r.Read(context.Background(), []Target{tgt}, now.Add(5*time.Second))
	if n := lists.Load(); n != 6 {
		t.Errorf("%d pod lists after the exporter pod went, want 6", n)
	}
}

// The exporter serves one reading until its next collect: within the collect interval the
// same values are a repeat, with the time of the first; new values, or the interval gone, a
// new reading.
func TestRepeatedReading(t *testing.T) {
	tgt := twoRankJob(t)
	pod := exporterPod("dcgm-a", "gpu-operator", "node-a", map[string]string{"app": "nvidia-dcgm-exporter"})
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "DCGM_EXPORTER_INTERVAL", Value: "10000"}}
	cs := fake.NewClientset(pod)
	body := scrape
	cs.AddProxyReactor("pods", func(k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
		return true, proxyBody(body), nil
	})
	r := &Reader{Client: cs, Exec: &fakeExec{smi: map[string]string{"train-1": "0, GPU-b0, 91, 1000, 81559\n"}}, Watching: true}
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	read := func(at time.Duration) Rank {
		return r.Read(context.Background(), []Target{tgt}, t0.Add(at))[0].Ranks[0]
	}
	check := func(what string, rk Rank, repeated bool, sampled time.Duration) {
		t.Helper()
		if rk.RepeatedReading != repeated || rk.GPUSampleTime == nil || !rk.GPUSampleTime.Equal(t0.Add(sampled)) {
			t.Errorf("%s: repeated %v sampled %v, want %v at +%s", what, rk.RepeatedReading, rk.GPUSampleTime, repeated, sampled)
		}
	}
	check("first", read(0), false, 0)
	check("same values 5s later", read(5*time.Second), true, 0)
	body = strings.Replace(scrape, "} 97\n", "} 42\n", 1)
	check("new values", read(6*time.Second), false, 6*time.Second)
	check("same values after the 10s interval", read(16*time.Second), false, 16*time.Second)
}

func TestCollectInterval(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  []corev1.EnvVar
		want time.Duration
	}{
		{nil, nil, 30 * time.Second},
		{[]string{"-f", "/etc/dcgm-exporter/dcp-metrics-included.csv", "-c", "5000"}, nil, 5 * time.Second},
		{[]string{"--collect-interval=15000"}, nil, 15 * time.Second},
		{[]string{"-c=2000"}, []corev1.EnvVar{{Name: "DCGM_EXPORTER_INTERVAL", Value: "9000"}}, 2 * time.Second},
		{nil, []corev1.EnvVar{{Name: "DCGM_EXPORTER_INTERVAL", Value: "9000"}}, 9 * time.Second},
		{[]string{"-c", "soon"}, nil, 30 * time.Second},
		{nil, []corev1.EnvVar{{Name: "DCGM_EXPORTER_INTERVAL", ValueFrom: &corev1.EnvVarSource{}}}, 30 * time.Second},
	} {
		pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Args: tc.args, Env: tc.env}}}}
		if got := CollectInterval(pod); got != tc.want {
			t.Errorf("args %q env %v: %s, want %s", tc.args, tc.env, got, tc.want)
		}
	}
}

// A log read refused by an API server that went away marks the reading cut short; a watch
// waits for the next one instead of showing it.
func TestReadUnreachable(t *testing.T) {
	tgt := twoRankJob(t)
	cs := fake.NewClientset()
	cs.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "log" {
			return true, nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}
		return false, nil, nil
	})
	got := (&Reader{Client: cs}).Read(context.Background(), []Target{tgt}, time.Now())[0]
	if got.Unreachable == nil {
		t.Errorf("a refused log read left no outage: notes %q", got.Notes)
	}
}
