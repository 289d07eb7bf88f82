package top_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/golden"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

var now = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

// series is one GPU of the exporter's scrape, held by pod (none when "").
func series(gpu int, node, pod string, util, usedMiB int) string {
	labels := fmt.Sprintf(`gpu="%d",UUID="GPU-%s-%d",device="nvidia%d",modelName="NVIDIA H100 80GB HBM3",Hostname="%s"`, gpu, node, gpu, gpu, node)
	if pod != "" {
		labels += fmt.Sprintf(`,container="tao",namespace="ml",pod="%s"`, pod)
	}
	return fmt.Sprintf("DCGM_FI_DEV_GPU_UTIL{%s} %d\nDCGM_FI_DEV_FB_USED{%s} %d\nDCGM_FI_DEV_FB_FREE{%s} %d\n",
		labels, util, labels, usedMiB, labels, 81559-usedMiB)
}

// migSeries is one MIG slice (GPU 0 of node, profile 1g.10gb, GPU instance gi) as
// dcgm-exporter writes it, held by pod (none when ""): no GPU_UTIL, engine activity a ratio,
// the slice's own framebuffer.
func migSeries(node string, gi int, pod string, active float64, usedMiB int) string {
	labels := fmt.Sprintf(`gpu="0",UUID="GPU-%s-0",pci_bus_id="00000000:1B:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="1g.10gb",GPU_I_ID="%d",hostname="%s",DCGM_FI_DRIVER_VERSION="580.95.05"`, node, gi, node)
	if pod != "" {
		labels += fmt.Sprintf(`,container="tao",namespace="ml",pod="%s"`, pod)
	}
	return fmt.Sprintf("DCGM_FI_DEV_FB_FREE{%s} %d\nDCGM_FI_DEV_FB_USED{%s} %d\nDCGM_FI_PROF_GR_ENGINE_ACTIVE{%s} %f\nDCGM_FI_PROF_PIPE_TENSOR_ACTIVE{%s} %f\n",
		labels, 9983-usedMiB, labels, usedMiB, labels, active, labels, active/2)
}

// gpuContainer is the training container asking for n of a GPU resource.
func gpuContainer(name corev1.ResourceName, n int64) corev1.Container {
	return corev1.Container{Name: jobspec.ContainerName, Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{name: *resource.NewQuantity(n, resource.DecimalSI)}}}
}

// migCluster runs job slices, a rank of one nvidia.com/mig-1g.10gb slice on each of nodes a
// and b: rank 0's slice busy, rank 1's idle and its memory nearly full; the other slice of
// a's GPU is nobody's.
func migCluster() *fake.Clientset {
	const slice = "nvidia.com/mig-1g.10gb"
	return exporting(map[string]string{
		"a": migSeries("a", 11, "slices-0", 0.91, 4000) + migSeries("a", 12, "", 0, 0),
		"b": migSeries("b", 13, "slices-1", 0.02, 9500),
	}, twoRankJob("slices", gpuContainer(slice, 1), jobspec.GPUResourceAnnotation, slice)...)
}

// sharedCluster runs job infer, a rank of one nvidia.com/gpu.shared on each of nodes a and b;
// time-slicing gives a's GPU to pod web-0 too.
func sharedCluster() *fake.Clientset {
	objs := twoRankJob("infer", gpuContainer(jobspec.SharedGPUResource, 1), jobspec.GPUResourceAnnotation, string(jobspec.SharedGPUResource))
	return exporting(map[string]string{
		"a": series(0, "a", "infer-0", 97, 70000) + series(0, "a", "web-0", 97, 70000),
		"b": series(0, "b", "infer-1", 40, 30000),
	}, objs...)
}

// topCheck is one run of top: its stdout is the golden file's, or want.
type topCheck struct {
	args         []string
	golden, want string
}

// checkTop runs each check against a cluster of its own, made by newCluster.
func checkTop(t *testing.T, newCluster func() *fake.Clientset, checks ...topCheck) {
	t.Helper()
	for _, c := range checks {
		r := run(newCluster(), c.args...)
		if r.Code != 0 || r.Stderr != "" {
			t.Fatalf("%v: exit %d\nstderr:\n%s", c.args, r.Code, r.Stderr)
		}
		if c.golden != "" {
			golden.Check(t, c.golden, r.Stdout)
		} else if r.Stdout != c.want {
			t.Errorf("%v: %q, want %q", c.args, r.Stdout, c.want)
		}
	}
}

// top of a MIG job reads each rank's own slice: its engine activity as GPU, its memory as GPU
// MEM, the profile and instance in -o wide and -o json.
func TestTopMIGJob(t *testing.T) {
	checkTop(t, migCluster,
		topCheck{args: []string{"slices"}, golden: "mig.txt"},
		topCheck{args: []string{"slices", "-o", "wide"}, golden: "mig-wide.txt"},
		topCheck{args: []string{"slices", "-o", "jsonpath={.gpuResource} {.sharedGPU} {.ranks[0].gpus[0].migProfile} {.ranks[0].gpus[0].migInstance} {.ranks[0].gpus[0].utilization} {.ranks[1].gpus[0].migInstance}"},
			want: "nvidia.com/mig-1g.10gb false 1g.10gb 11 91 13"})
}

// top of a job on shared GPUs says in its line, each GPU cell and -o json that the numbers are
// the whole GPU's; so does the row of the job without JOB. Only a's GPU is seen shared by the
// exporter (the GPU's shared is left out when false); the job's resource says both are.
func TestTopSharedGPUJob(t *testing.T) {
	checkTop(t, sharedCluster,
		topCheck{args: []string{"infer"}, golden: "shared.txt"},
		topCheck{golden: "shared-jobs.txt"},
		topCheck{args: []string{"infer", "-o", "jsonpath={.gpuResource} {.sharedGPU} {.ranks[0].gpus[0].shared} {.ranks[1].gpus[0].shared}"},
			want: "nvidia.com/gpu.shared true true "})
}

// The job's line names what its GPUs are when that changes what the GPU columns mean.
func TestTopGPUsLine(t *testing.T) {
	const mig, migShared = "nvidia.com/mig-1g.10gb", "nvidia.com/mig-1g.10gb.shared"
	whole := fixture.GPUContainer(jobspec.ContainerName, 1)
	for _, tc := range []struct {
		name   string
		objs   []runtime.Object
		scrape map[string]string
		want   string
	}{
		{"whole GPUs", twoRankJob("j", whole), map[string]string{"a": series(0, "a", "j-0", 50, 100)},
			"job.batch/j  Running  GPU metrics: dcgm-exporter\n"},
		{"time-sliced nvidia.com/gpu the exporter maps to two pods", twoRankJob("j", whole),
			map[string]string{"a": series(0, "a", "j-0", 50, 100) + series(0, "a", "web-0", 50, 100)},
			"job.batch/j  Running  GPU metrics: dcgm-exporter  GPUs shared with other pods: GPU and GPU MEM are the whole GPU's, not the job's\n"},
		{"MIG slices", twoRankJob("j", gpuContainer(mig, 1), jobspec.GPUResourceAnnotation, mig), map[string]string{"a": migSeries("a", 1, "j-0", 0.5, 100)},
			"job.batch/j  Running  GPU metrics: dcgm-exporter  GPUs: nvidia.com/mig-1g.10gb, MIG slices: GPU is each slice's engine activity, GPU MEM its own memory\n"},
		{"shared MIG slices", twoRankJob("j", gpuContainer(migShared, 1), jobspec.GPUResourceAnnotation, migShared), map[string]string{"a": migSeries("a", 1, "j-0", 0.5, 100)},
			"job.batch/j  Running  GPU metrics: dcgm-exporter  GPUs: nvidia.com/mig-1g.10gb.shared, shared with other pods: GPU and GPU MEM are the whole GPU's, not the job's\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(exporting(tc.scrape, tc.objs...), "j")
			if r.Code != 0 {
				t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
			}
			if line, _, _ := strings.Cut(r.Stdout, "\n"); line+"\n" != tc.want {
				t.Errorf("line:\n%s\nwant:\n%s", line, tc.want)
			}
		})
	}
}

type body string

func (b body) DoRaw(context.Context) ([]byte, error) { return []byte(b), nil }
func (b body) Stream(context.Context) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(string(b))), nil
}

// cluster is running 2-rank jobs of 2 GPUs per rank on nodes a and b, dcgm-exporter on both:
// rank 0 busy, rank 1 idle.
func cluster(t *testing.T, names ...string) *fake.Clientset {
	t.Helper()
	var objs []runtime.Object
	scrape := map[string]string{}
	for i, name := range names {
		objs = append(objs, twoRankJob(name, fixture.GPUContainer(jobspec.ContainerName, 2))...)
		scrape["a"] += series(2*i, "a", name+"-0", 97, 70000) + series(2*i+1, "a", name+"-0", 95, 70000)
		scrape["b"] += series(2*i, "b", name+"-1", 2, 78000) + series(2*i+1, "b", name+"-1", 3, 78000)
	}
	scrape["a"] += series(7, "a", "", 0, 0)
	return exporting(scrape, objs...)
}

// twoRankJob is a running 2-rank Job of the container (rank 0 on node a, rank 1 on b) and its
// pods, NAME-0 and NAME-1; annotations are the Job's, in pairs.
func twoRankJob(name string, c corev1.Container, annotations ...string) []runtime.Object {
	w := fixture.Job(name).Namespace("ml").UID("uid-"+name).Created(now.Add(-time.Hour)).Nodes(2).Indexed().
		Label(jobspec.ManagedByLabel, jobspec.ManagedByValue)
	for i := 0; i+1 < len(annotations); i += 2 {
		w = w.Annotation(annotations[i], annotations[i+1])
	}
	job := w.Container(c).Active(2).Ready(2).Started(now.Add(-time.Hour)).Obj()
	objs := []runtime.Object{job}
	for rank, node := range []string{"a", "b"} {
		objs = append(objs, fixture.RankPod(job, rank).Name(fmt.Sprintf("%s-%d", name, rank)).Node(node).Running(now.Add(-time.Hour)).Obj())
	}
	return objs
}

// exporting is a cluster of objs with dcgm-exporter on nodes a and b, serving scrape[node].
func exporting(scrape map[string]string, objs ...runtime.Object) *fake.Clientset {
	for _, node := range []string{"a", "b"} {
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "nvidia-dcgm-exporter-" + node, Namespace: "gpu-operator", Labels: map[string]string{"app": "nvidia-dcgm-exporter"}},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "e", Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9400}}}}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
	c := fake.NewClientset(objs...)
	c.AddProxyReactor("pods", func(a k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
		return true, body(scrape[strings.TrimPrefix(a.(k8stesting.ProxyGetAction).GetName(), "nvidia-dcgm-exporter-")]), nil
	})
	return c
}

func run(c *fake.Clientset, args ...string) cmdtest.Result {
	return cmdtest.Cmd{NS: "ml", Client: c, Now: now}.Run(context.Background(), append([]string{"top"}, args...)...)
}

func TestTopJob(t *testing.T) {
	r := run(cluster(t, "train"), "train")
	if r.Code != 0 || r.Stderr != "" {
		t.Fatalf("exit %d\nstderr:\n%s", r.Code, r.Stderr)
	}
	golden.Check(t, "job.txt", r.Stdout)
}

func TestTopJobWide(t *testing.T) {
	r := run(cluster(t, "train"), "train", "-o", "wide")
	if r.Code != 0 {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	golden.Check(t, "job-wide.txt", r.Stdout)
}

// The JSON keys are a contract with scripts: a golden file holds them.
func TestTopJobJSON(t *testing.T) {
	r := run(cluster(t, "train"), "train", "-o", "json")
	if r.Code != 0 {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil {
		t.Fatalf("%v\n%s", err, r.Stdout)
	}
	golden.Check(t, "job.json", r.Stdout)
	r = run(cluster(t, "train"), "train", "-o", "jsonpath={.ranks[1].gpus[0].utilization}")
	if r.Stdout != "2" {
		t.Errorf("jsonpath: %q", r.Stdout)
	}
}

func TestTopAllJobs(t *testing.T) {
	r := run(cluster(t, "train", "eval"))
	if r.Code != 0 {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	golden.Check(t, "jobs.txt", r.Stdout)
}

func TestTopNoRunningJobs(t *testing.T) {
	r := run(fake.NewClientset())
	if r.Code != 0 || r.Stdout != "" || r.Stderr != "No running jobs in namespace ml.\n" {
		t.Fatalf("exit %d\nstdout %q\nstderr %q", r.Code, r.Stdout, r.Stderr)
	}
	r = run(fake.NewClientset(), "-o", "json")
	if r.Code != 0 || strings.TrimSpace(r.Stdout) != `{
    "jobs": []
}` {
		t.Fatalf("exit %d\nstdout %q", r.Code, r.Stdout)
	}
}

func TestTopNotFound(t *testing.T) {
	r := run(fake.NewClientset(), "absent")
	if r.Code != int(exitcode.NotFound) || !strings.Contains(r.Stderr, "job.batch/absent not found in namespace ml") {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
}

func TestTopBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"train", "-A"},
		{"train", "--interval", "0s"},
		{"train", "--silent-after", "0s"},
		{"train", "-o", "name"},
		{"a", "b"},
	} {
		r := run(cluster(t, "train"), args...)
		if r.Code != int(exitcode.Usage) || r.Stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, r.Code, r.Stdout, r.Stderr)
		}
	}
}

// Without an exporter and without exec (a fake client cannot), the GPU columns are "-" and
// one line says why.
func TestTopNoMetricsSaysOnce(t *testing.T) {
	c := cluster(t, "train")
	_ = c.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "gpu-operator", "nvidia-dcgm-exporter-a")
	_ = c.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "gpu-operator", "nvidia-dcgm-exporter-b")
	r := run(c, "train")
	if r.Code != 0 {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	want := "Warning: no GPU numbers: no dcgm-exporter runs on the job's nodes (the NVIDIA GPU Operator deploys one); nvidia-smi failed: this client cannot exec in pods\n"
	if r.Stderr != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", r.Stderr, want)
	}
	if !strings.Contains(r.Stdout, "GPU metrics: none") || strings.Contains(r.Stdout, "%") {
		t.Errorf("stdout:\n%s", r.Stdout)
	}
}

// -w redraws every interval; piped, the frames are apart by a blank line, and the history
// column grows a sparkline, a point per new reading.
func TestTopWatch(t *testing.T) {
	c := cluster(t, "train")
	// Each scrape a new reading, as an exporter collecting faster than -w reads.
	var callsA, callsB atomic.Int32
	c.PrependProxyReactor("pods", func(a k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
		if strings.HasSuffix(a.(k8stesting.ProxyGetAction).GetName(), "-a") {
			n := int(callsA.Add(1))
			return true, body(series(0, "a", "train-0", 95+n%3, 70000) + series(1, "a", "train-0", 95+n%3, 70000)), nil
		}
		n := int(callsB.Add(1))
		return true, body(series(0, "b", "train-1", n%2, 78000) + series(1, "b", "train-1", n%2, 78000)), nil
	})
	frames := watchFrames(t, c)
	last := frames[len(frames)-1]
	if !strings.Contains(frames[0], "HISTORY") || !strings.Contains(last, "  ██") || !strings.Contains(last, "  ▁▁") {
		t.Errorf("frames:\n%s", strings.Join(frames, "\n\njob.batch/"))
	}
}

// watchFrames runs top -w --interval 1s for 2.5 s and returns its frames (at least 2).
func watchFrames(t *testing.T, c *fake.Clientset) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	r := cmdtest.Cmd{NS: "ml", Client: c, Now: now}.Run(ctx, "top", "train", "-w", "--interval", "1s")
	if r.Code != 0 {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	frames := strings.Split(r.Stdout, "\n\njob.batch/")
	if len(frames) < 2 {
		t.Fatalf("%d frames:\n%s", len(frames), r.Stdout)
	}
	return frames
}

// The exporter serves the same reading until its next collect (30 s by default): -w reading
// it again within that time shows it once in the history, not as a flat trend.
func TestTopWatchRepeatedReadingIsNoTrend(t *testing.T) {
	frames := watchFrames(t, cluster(t, "train"))
	last := frames[len(frames)-1]
	if !strings.Contains(last, " 1         █\n") || !strings.Contains(last, " 1         ▁\n") {
		t.Errorf("the last frame has more than one point per rank:\n%s", last)
	}
}

// -w goes on through an API-server outage: one line when it has lasted a while, one when the
// server answers again, and the readings after it.
func TestTopWatchSurvivesOutage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5500*time.Millisecond)
	defer cancel()
	c := cluster(t, "train")
	var gets atomic.Int32
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	c.PrependReactor("get", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		if n := gets.Add(1); n >= 2 && n <= 4 {
			return true, nil, refused
		}
		return false, nil, nil
	})
	var out testbuf.Buffer
	r := cmdtest.Cmd{NS: "ml", Client: c, Stdout: &out}.Run(ctx, "top", "train", "-w", "--interval", "1s", "-o", "json")
	if r.Code != 0 {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.Stderr, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "watching job.batch/train: the API server is unreachable since ") ||
		!strings.HasPrefix(lines[1], "watching job.batch/train: the API server answers again (unreachable for ") {
		t.Errorf("stderr, want the outage's two lines:\n%s", r.Stderr)
	}
	dec := json.NewDecoder(strings.NewReader(r.Stdout))
	readings := 0
	for dec.More() {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("%v\n%s", err, r.Stdout)
		}
		readings++
	}
	// One before the outage, at least one after it; none for the failed gets.
	if int32(readings) != gets.Load()-3 || readings < 2 {
		t.Errorf("%d readings printed of %d gets:\n%s", readings, gets.Load(), r.Stdout)
	}
}
