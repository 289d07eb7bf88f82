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
	for _, node := range []string{"a", "b"} {
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "nvidia-dcgm-exporter-" + node, Namespace: "gpu-operator", Labels: map[string]string{"app": "nvidia-dcgm-exporter"}},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "e", Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9400}}}}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
	scrape := map[string]string{}
	for i, name := range names {
		job := fixture.Job(name).Namespace("ml").UID("uid-"+name).Created(now.Add(-time.Hour)).Nodes(2).Indexed().
			Label(jobspec.ManagedByLabel, jobspec.ManagedByValue).
			Container(fixture.GPUContainer(jobspec.ContainerName, 2)).Active(2).Ready(2).Started(now.Add(-time.Hour)).Obj()
		objs = append(objs, job)
		for rank, node := range []string{"a", "b"} {
			objs = append(objs, fixture.RankPod(job, rank).Name(fmt.Sprintf("%s-%d", name, rank)).Node(node).Running(now.Add(-time.Hour)).Obj())
		}
		scrape["a"] += series(2*i, "a", name+"-0", 97, 70000) + series(2*i+1, "a", name+"-0", 95, 70000)
		scrape["b"] += series(2*i, "b", name+"-1", 2, 78000) + series(2*i+1, "b", name+"-1", 3, 78000)
	}
	scrape["a"] += series(7, "a", "", 0, 0)
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
