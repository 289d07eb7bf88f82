package jobtop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// scrape is what the exporter on node-a serves: rank 0's two GPUs, busy, and a GPU of no pod.
const scrape = `# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",container="tao",namespace="ml",pod="train-0"} 97
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-a1",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",container="tao",namespace="ml",pod="train-0"} 95
DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-a2",device="nvidia2",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a"} 0
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",container="tao",namespace="ml",pod="train-0"} 70000
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-a1",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",container="tao",namespace="ml",pod="train-0"} 70000
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-a0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",container="tao",namespace="ml",pod="train-0"} 11559
DCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-a1",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",container="tao",namespace="ml",pod="train-0"} 11559
`

// fakeExec answers nvidia-smi and the progress read, and counts the execs per pod.
type fakeExec struct {
	mu       sync.Mutex
	calls    map[string]int
	smi      map[string]string // pod -> CSV
	progress string
	err      error
}

func (f *fakeExec) Exec(_ context.Context, _, pod, container string, command []string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[pod]++
	if container != jobspec.ContainerName {
		return nil, fmt.Errorf("exec in container %q", container)
	}
	if f.err != nil {
		return nil, f.err
	}
	if command[0] == "nvidia-smi" {
		if strings.Join(command, " ") != strings.Join(NvidiaSMIQuery, " ") {
			return nil, fmt.Errorf("unexpected query %v", command)
		}
		return []byte(f.smi[pod]), nil
	}
	// /bin/sh -c progressScript sh SPEC progressPython
	if len(command) != 6 || command[4] != "/out/" {
		return nil, fmt.Errorf("progress read %q, want a read of the first --output-path", command)
	}
	return []byte(f.progress), nil
}

// proxyBody is a ResponseWrapper serving a fixed body.
type proxyBody string

func (b proxyBody) DoRaw(context.Context) ([]byte, error) { return []byte(b), nil }
func (b proxyBody) Stream(context.Context) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(string(b))), nil
}

// proxyErr is a ResponseWrapper whose request fails, as the API server's refusal does.
type proxyErr struct{ err error }

func (p proxyErr) DoRaw(context.Context) ([]byte, error)         { return nil, p.err }
func (p proxyErr) Stream(context.Context) (io.ReadCloser, error) { return nil, p.err }

func twoRankJob(t *testing.T) Target {
	t.Helper()
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	job := fixture.Job("train").Namespace("ml").UID("u1").Nodes(2).Indexed().Active(2).
		Annotation("kubectl-tao.dev/outputs", "/out").
		Container(gpuContainer()).Obj()
	var pods []corev1.Pod
	for rank, node := range []string{"node-a", "node-b"} {
		pods = append(pods, fixture.RankPod(job, rank).Name(fmt.Sprintf("train-%d", rank)).Node(node).Running(now.Add(-time.Hour)).Val())
	}
	return Target{Job: job, Pods: pods}
}

func gpuContainer() corev1.Container {
	c := fixture.GPUContainer(jobspec.ContainerName, 2)
	c.Env = []corev1.EnvVar{{Name: jobspec.EnvPythonUnbuffered, Value: "1"}}
	return c
}

func exporterPod(name, ns, node string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "exporter",
			Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9400}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func TestReadExporterAndFallback(t *testing.T) {
	tgt := twoRankJob(t)
	cs := fake.NewClientset(exporterPod("dcgm-a", "gpu-operator", "node-a", map[string]string{"app": "nvidia-dcgm-exporter"}))
	var proxied []string
	cs.AddProxyReactor("pods", func(a k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
		p := a.(k8stesting.ProxyGetAction)
		proxied = append(proxied, fmt.Sprintf("%s/%s:%s%s", p.GetNamespace(), p.GetName(), p.GetPort(), p.GetPath()))
		return true, proxyBody(scrape), nil
	})
	ex := &fakeExec{
		smi:      map[string]string{"train-1": "0, GPU-b0, 3, 1000, 81559\n1, GPU-b1, 2, 1000, 81559\n"},
		progress: "120\n" + `{"date": "12/5/2026", "time": "11:58:0", "status": "RUNNING", "epoch": 12, "max_epoch": 80, "time_per_epoch": "0:02:00", "eta": "2:16:00", "kpi": {"loss": 0.25}}` + "\n",
	}
	r := &Reader{Client: cs, Exec: ex}
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	got := r.Read(context.Background(), []Target{tgt}, now)[0]

	if want := []string{"gpu-operator/dcgm-a:9400/metrics"}; fmt.Sprint(proxied) != fmt.Sprint(want) {
		t.Errorf("proxied %v, want %v (one request, for the node with an exporter)", proxied, want)
	}
	if got.MetricsSource != SourceMixed || got.Ranks[0].MetricsSource != SourceDCGM || got.Ranks[1].MetricsSource != SourceNvidiaSMI {
		t.Errorf("sources %s / %s / %s", got.MetricsSource, got.Ranks[0].MetricsSource, got.Ranks[1].MetricsSource)
	}
	if len(got.Ranks[0].GPUs) != 2 || got.Ranks[0].GPUs[0].UUID != "GPU-a0" || *got.Ranks[0].GPUs[0].Utilization != 97 {
		t.Errorf("rank 0 GPUs %+v", got.Ranks[0].GPUs)
	}
	if total := *got.Ranks[0].GPUs[0].MemoryTotalBytes; total != 81559<<20 {
		t.Errorf("rank 0 GPU 0 total %d", total)
	}
	if ex.calls["train-0"] != 1 || ex.calls["train-1"] != 1 {
		t.Errorf("execs %v: want rank 0's progress read only, and rank 1's nvidia-smi only", ex.calls)
	}
	if got.Progress == nil || got.Progress.String() != "epoch 12/80" || got.Progress.KPI["loss"] != 0.25 {
		t.Errorf("progress %+v", got.Progress)
	}
	if got.GPUs != 4 || got.Status != "Running" {
		t.Errorf("gpus %d status %s", got.GPUs, got.Status)
	}
	// Rank 1 is busy with nothing (3%) while rank 0 works: the straggler finding.
	if len(got.Findings) != 1 || got.Findings[0].NodeEventName != "IdleGPUs" || got.Findings[0].Rank != 1 {
		t.Errorf("findings %+v", got.Findings)
	}
	if len(got.Notes) != 0 {
		t.Errorf("notes %v", got.Notes)
	}
}

func TestReadNothingAvailableSaysOnce(t *testing.T) {
	tgt := twoRankJob(t)
	cs := fake.NewClientset()
	ex := &fakeExec{err: errors.New(`command terminated with exit code 127: exec: "nvidia-smi": executable file not found in $PATH`)}
	r := &Reader{Client: cs, Exec: ex}
	got := r.Read(context.Background(), []Target{tgt}, time.Now())[0]
	if got.MetricsSource != SourceNone {
		t.Errorf("source %s", got.MetricsSource)
	}
	for _, rk := range got.Ranks {
		if len(rk.GPUs) != 0 || rk.MetricsSource != SourceNone {
			t.Errorf("rank %d: %+v", rk.Rank, rk)
		}
	}
	want := []string{
		"no GPU numbers: no dcgm-exporter runs on the job's nodes (the NVIDIA GPU Operator deploys one); the image has no nvidia-smi (NVIDIA's NGC images have it, with the utility driver capability)",
	}
	if strings.Join(got.Notes, "\n") != strings.Join(want, "\n") {
		t.Errorf("notes:\n%s\nwant:\n%s", strings.Join(got.Notes, "\n"), strings.Join(want, "\n"))
	}
}

func TestReadProxyForbiddenFallsBack(t *testing.T) {
	tgt := twoRankJob(t)
	cs := fake.NewClientset(exporterPod("dcgm-a", "monitoring", "node-a", map[string]string{"app.kubernetes.io/name": "dcgm-exporter"}))
	cs.AddProxyReactor("pods", func(k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
		return true, proxyErr{apierrors.NewForbidden(schema.GroupResource{Resource: "pods/proxy"}, "dcgm-a", errors.New("no"))}, nil
	})
	ex := &fakeExec{smi: map[string]string{"train-0": "0, GPU-a0, 90, 1000, 81559\n", "train-1": "0, GPU-b0, 91, 1000, 81559\n"}}
	r := &Reader{Client: cs, Exec: ex}
	got := r.Read(context.Background(), []Target{tgt}, time.Now())[0]
	if got.MetricsSource != SourceNvidiaSMI {
		t.Errorf("source %s, ranks %+v", got.MetricsSource, got.Ranks)
	}
	want := "reading dcgm-exporter needs get on pods/proxy in namespace monitoring (`kubectl tao rbac --gpu-metrics` prints a Role); using nvidia-smi in the ranks instead"
	if got.Ranks[1].MetricsSource != SourceNvidiaSMI {
		t.Errorf("rank 1 (no exporter on its node): %s", got.Ranks[1].MetricsSource)
	}
	if len(got.Notes) != 1 || got.Notes[0] != want {
		t.Errorf("notes %q", got.Notes)
	}
}

func TestReadListForbiddenLooksInOperatorNamespace(t *testing.T) {
	tgt := twoRankJob(t)
	cs := fake.NewClientset(exporterPod("dcgm-b", OperatorNamespace, "node-b", map[string]string{"app": "nvidia-dcgm-exporter"}))
	cs.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "" {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("cluster scope"))
		}
		return false, nil, nil
	})
	var proxied int
	cs.AddProxyReactor("pods", func(k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
		proxied++
		return true, proxyBody(strings.ReplaceAll(scrape, `pod="train-0"`, `pod="train-1"`)), nil
	})
	r := &Reader{Client: cs, Exec: &fakeExec{smi: map[string]string{"train-0": "0, GPU-a0, 90, 1000, 81559\n"}}}
	got := r.Read(context.Background(), []Target{tgt}, time.Now())[0]
	if proxied != 1 || got.Ranks[1].MetricsSource != SourceDCGM || got.Ranks[0].MetricsSource != SourceNvidiaSMI {
		t.Errorf("proxied %d, sources %s %s, notes %v", proxied, got.Ranks[0].MetricsSource, got.Ranks[1].MetricsSource, got.Notes)
	}
}

func TestStatusFileOf(t *testing.T) {
	tests := []struct {
		annotations map[string]string
		want        string
		ok          bool
	}{
		{nil, "/results/", true},
		{map[string]string{"kubectl-tao.dev/outputs": "/out/a\n/out/b"}, "/out/a/", true},
		{map[string]string{"kubectl-tao.dev/status-file": "/x/status.json", "kubectl-tao.dev/outputs": "/out"}, "/x/status.json", true},
		{map[string]string{"kubectl-tao.dev/status-file": ""}, "", false},
	}
	for _, tc := range tests {
		job := fixture.Job("j").Obj()
		job.Annotations = tc.annotations
		got, ok := StatusFileOf(job)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%v: got %q %v, want %q %v", tc.annotations, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseProgressOutput(t *testing.T) {
	line := `{"date": "12/5/2026", "time": "1:2:3", "status": "RUNNING", "epoch": 2, "max_epoch": 10}`
	// A file longer than the tail read: its first line may be cut, so it is dropped.
	if p := parseProgressOutput([]byte("999999\n" + line + "\n" + line + "\n")); p == nil || *p.Epoch != 2 {
		t.Errorf("long file: %+v", p)
	}
	if p := parseProgressOutput([]byte(fmt.Sprintf("%d\n%s\n", len(line)+1, line))); p == nil || *p.Epoch != 2 {
		t.Errorf("whole file: %+v", p)
	}
	for _, bad := range []string{"", "12", "x\n{}\n"} {
		if p := parseProgressOutput([]byte(bad)); p != nil {
			t.Errorf("%q: %+v", bad, p)
		}
	}
}
