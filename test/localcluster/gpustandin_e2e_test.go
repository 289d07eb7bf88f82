//go:build e2e

package localcluster

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// series is one sample of the exporter's text.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

var (
	seriesLine = regexp.MustCompile(`^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\} (\S+)$`)
	labelPair  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"`)
)

func parseExposition(t *testing.T, text string) []series {
	t.Helper()
	var out []series
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := seriesLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("not a series line: %q", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("value of %q: %v", line, err)
		}
		s := series{name: m[1], labels: map[string]string{}, value: v}
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[p[1]] = p[2]
		}
		out = append(out, s)
	}
	return out
}

// scrapeExporter reads the node's exporter through the API server's pod proxy, as
// `kubectl tao top` does.
func scrapeExporter(ctx context.Context, t *testing.T, cs kubernetes.Interface, pod string) []series {
	t.Helper()
	raw, err := cs.CoreV1().Pods(GPUExporterNamespace).ProxyGet("http", pod, strconv.Itoa(GPUExporterPort), "metrics", nil).DoRaw(ctx)
	if err != nil {
		t.Fatalf("GET the exporter's /metrics through the pod proxy: %v", err)
	}
	return parseExposition(t, string(raw))
}

// TestGPUStandins runs a pod holding two of the real node's GPUs and checks what the
// dcgm-exporter stand-in says about them (pod labels from the kubelet's PodResources API,
// values from SetGPUMetrics), what the test image's nvidia-smi prints in the pod, and that the
// exporter stops and starts for the "no exporter" case.
func TestGPUStandins(t *testing.T) {
	requireRealNodeHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var cfg Config
	if os.Getenv("TAO_REAL_NODE") != "" {
		// Under make e2e the suite's cluster holds the machine's node.
		cfg = Config{StateDir: filepath.Dir(os.Getenv("KUBECONFIG")), Progress: testWriter{t}}
		if err := cfg.Complete(); err != nil {
			t.Fatal(err)
		}
	} else {
		cfg = testCluster(t, 1, RealNodeOn, 3*time.Minute)
		upRealNode(ctx, t, cfg)
		defer func() { _ = Down(context.Background(), cfg) }()
	}
	// It stops the exporter below: no other test may read it meanwhile.
	unlock, err := LockGPUExporter(cfg.StateDir, true)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	info, ok := readNodeInfo(realNodeFile(cfg.StateDir))
	if !ok {
		t.Fatal("no node record")
	}
	cs := clientFor(t, cfg.StateDir)

	// The exporter is there after up, found as the GPU Operator's is.
	sel := metav1.ListOptions{LabelSelector: GPUExporterLabelKey + "=" + GPUExporterLabelValue, FieldSelector: "spec.nodeName=" + info.Name}
	exporters, err := cs.CoreV1().Pods(GPUExporterNamespace).List(ctx, sel)
	if err != nil || len(exporters.Items) != 1 {
		t.Fatalf("exporter pods on %s: %v, %v", info.Name, exporters, err)
	}
	exp := exporters.Items[0]
	if !podReady(&exp) || exp.Spec.Containers[0].Ports[0].Name != GPUExporterPortName || exp.Spec.Containers[0].Ports[0].ContainerPort != GPUExporterPort {
		t.Fatalf("exporter pod %s not Ready or without port %s/%d: %+v", exp.Name, GPUExporterPortName, GPUExporterPort, exp.Status)
	}

	// A pod holding 2 GPUs, which runs nvidia-smi and stays up so the kubelet lists it.
	const name = "gpu-holder"
	script := `printf 'util=97\nmem_used_mib=70000\n' > /tmp/nvidia-smi-stand-in
echo "gpus=$NVIDIA_VISIBLE_DEVICES"
nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits
echo "rc=$?"
nvidia-smi --query-gpu=index,bogus --format=csv
echo "rc=$?"
echo done
exec sleep 3600`
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			NodeSelector:  map[string]string{RealNodeLabel: "true", "kubernetes.io/hostname": info.Name},
			Tolerations:   []corev1.Toleration{{Key: RealNodeLabel, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{
				Name: "c", Image: shortRef(TestImageRef), ImagePullPolicy: corev1.PullNever,
				Command:   []string{"/bin/sh", "-c", script},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{GPUResource: *resource.NewQuantity(2, resource.DecimalSI)}},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		grace := int64(1)
		_ = cs.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	}()
	var log string
	waitFor(ctx, t, "pod "+name+" ran nvidia-smi", func() (bool, error) {
		raw, err := cs.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		log = string(raw)
		return err == nil && strings.Contains(log, "done\n"), nil
	})
	lines := strings.Split(strings.TrimSpace(log), "\n")
	if len(lines) != 7 {
		t.Fatalf("pod log:\n%s", log)
	}
	ids := strings.Split(strings.TrimPrefix(lines[0], "gpus="), ",")
	if len(ids) != 2 {
		t.Fatalf("NVIDIA_VISIBLE_DEVICES: %q", lines[0])
	}
	if ids[0] > ids[1] {
		ids[0], ids[1] = ids[1], ids[0]
	}
	want := "0, " + ids[0] + ", 97, 70000, 81559\n1, " + ids[1] + ", 97, 70000, 81559\nrc=0\n" +
		"Field \"bogus\" is not a valid field to query.\nrc=2"
	if got := strings.Join(lines[1:6], "\n"); got != want {
		t.Errorf("nvidia-smi in the pod printed:\n%s\nwant:\n%s", got, want)
	}

	check := func(s []series, m GPUMetrics) {
		t.Helper()
		held := map[string]int{}
		for _, x := range s {
			uuid := x.labels["UUID"]
			if contains(ids, uuid) {
				held[x.name]++
				if x.labels["pod"] != name || x.labels["namespace"] != "default" || x.labels["container"] != "c" || x.labels["Hostname"] != info.Name {
					t.Errorf("%s of %s: labels %v, want pod default/%s container c on %s", x.name, uuid, x.labels, name, info.Name)
				}
				want := map[string]float64{
					"DCGM_FI_DEV_GPU_UTIL": m.Util, "DCGM_FI_DEV_FB_USED": float64(m.MemUsedMiB), "DCGM_FI_DEV_XID_ERRORS": float64(m.Xid),
					"DCGM_FI_DEV_FB_FREE": float64(81559 - 512 - m.MemUsedMiB), "DCGM_FI_PROF_GR_ENGINE_ACTIVE": m.Util / 100,
				}
				if w, ok := want[x.name]; ok && x.value != w {
					t.Errorf("%s of %s = %v, want %v", x.name, uuid, x.value, w)
				}
				continue
			}
			if x.labels["pod"] != "" || (x.name == "DCGM_FI_DEV_GPU_UTIL" && x.value != 0) {
				t.Errorf("a GPU no pod holds: %s %v %v", x.name, x.labels, x.value)
			}
		}
		if held["DCGM_FI_DEV_GPU_UTIL"] != 2 || held["DCGM_FI_DEV_FB_USED"] != 2 {
			t.Errorf("series of the pod's GPUs: %v, want 2 of each", held)
		}
	}
	// Before any values: the pod's GPUs are labelled and idle.
	check(scrapeExporter(ctx, t, cs, exp.Name), GPUMetrics{})
	m := GPUMetrics{Util: 97, MemUsedMiB: 70000, Xid: 79}
	if err := SetGPUMetrics(cfg.StateDir, "default", name, m); err != nil {
		t.Fatal(err)
	}
	// The exporter serves its last collect: the values show from the next one on.
	time.Sleep(2 * GPUExporterInterval)
	s := scrapeExporter(ctx, t, cs, exp.Name)
	check(s, m)
	// A slice of the node's GPU in MIG mode has only the 4 counters DCGM keeps per GPU instance.
	if want := info.GPUs*7 + info.MIGSlices*4; len(s) != want {
		t.Errorf("%d series, want %d: 7 per whole GPU, 4 per MIG slice", len(s), want)
	}

	// No exporter, then the exporter again.
	if err := StopGPUExporter(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if left, _ := cs.CoreV1().Pods(GPUExporterNamespace).List(ctx, sel); len(left.Items) != 0 {
		t.Errorf("exporter pods after StopGPUExporter: %d", len(left.Items))
	}
	if err := StartGPUExporter(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	check(scrapeExporter(ctx, t, cs, exp.Name), m)
}
