package localcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/test/localcluster/gpustandin"
)

// The real node's GPU metrics: the dcgm-exporter stand-in (cmd/dcgmstandin) runs as a pod on
// the node the way the NVIDIA GPU Operator runs dcgm-exporter, so `kubectl tao top` finds and
// reads it as it would on a real cluster. A plain pod, not a DaemonSet: down drains the node's
// pods, and a DaemonSet controller would put the exporter back while it does. Pods cannot
// reach the API server, so tests hand the exporter each pod's values through files in the
// state dir that the pod mounts.

// Where and how the exporter runs, as the GPU Operator names it.
const (
	GPUExporterNamespace = "gpu-operator"
	// GPUExporterLabelKey=GPUExporterLabelValue is the label of the exporter's pods.
	GPUExporterLabelKey   = "app"
	GPUExporterLabelValue = "nvidia-dcgm-exporter"
	GPUExporterPort       = 9400
	GPUExporterPortName   = "metrics"
	// GPUExporterInterval is how often the exporter collects: the real one's 30 s default
	// would make every test that sets values wait half a minute for them.
	GPUExporterInterval = time.Second
	// gpuExporterValuesMount is where the exporter sees GPUMetricsDir.
	gpuExporterValuesMount = "/run/gpu-metrics"
)

// GPUMetrics is what every GPU a pod holds shows on the real node: utilization in percent,
// framebuffer used in MiB, the last Xid error (0: none). A pod without metrics shows zeros.
type GPUMetrics = gpustandin.Values

// GPUMetricsDir is the host directory of the exporter's values: one file per pod,
// NAMESPACE/POD, in the key=value lines SetGPUMetrics writes.
func GPUMetricsDir(stateDir string) string {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		abs = stateDir
	}
	return filepath.Join(abs, "gpu-metrics")
}

// SetGPUMetrics sets what the GPUs of pod namespace/pod show in the real node's exporter from
// its next collect on (GPUExporterInterval). The file is replaced by a rename, so a scrape never reads half of it.
func SetGPUMetrics(stateDir, namespace, pod string, m GPUMetrics) error {
	for _, name := range []string{namespace, pod} {
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
			return fmt.Errorf("SetGPUMetrics: %q is not a namespace or pod name", name)
		}
	}
	dir := filepath.Join(GPUMetricsDir(stateDir), namespace)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+pod+".tmp*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(m.Format()); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	// The exporter runs as root, but the file is plain data anyone on the host may read.
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, pod)); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// gpuExporterPodName names the node's exporter pod like a DaemonSet pod of the GPU Operator's
// (nvidia-dcgm-exporter-<5 characters>), one per cluster.
func gpuExporterPodName(stateDir string) string {
	return GPUExporterLabelValue + "-" + nodeID(stateDir)[:5]
}

// gpuExporterPod is the exporter's pod on the real node: the container, port, environment and
// pod-resources mount of the GPU Operator's exporter, plus the values directory.
func gpuExporterPod(info RealNodeInfo) *corev1.Pod {
	dirType, createType := corev1.HostPathDirectory, corev1.HostPathDirectoryOrCreate
	no := false
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: gpuExporterPodName(info.StateDir), Namespace: GPUExporterNamespace,
			Labels: map[string]string{GPUExporterLabelKey: GPUExporterLabelValue},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName:            GPUExporterLabelValue,
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			NodeSelector:                  map[string]string{RealNodeLabel: "true", "kubernetes.io/hostname": info.Name},
			Tolerations:                   []corev1.Toleration{{Key: RealNodeLabel, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{
				Name: GPUExporterLabelValue, Image: shortRef(DCGMImageRef), ImagePullPolicy: corev1.PullNever,
				Args: gpuExporterArgs(info),
				Env: []corev1.EnvVar{
					{Name: "DCGM_EXPORTER_KUBERNETES", Value: "true"},
					{Name: "DCGM_EXPORTER_LISTEN", Value: fmt.Sprintf(":%d", GPUExporterPort)},
					{Name: "DCGM_EXPORTER_INTERVAL", Value: fmt.Sprint(GPUExporterInterval.Milliseconds())},
					{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
				},
				Ports: []corev1.ContainerPort{{Name: GPUExporterPortName, ContainerPort: GPUExporterPort, Protocol: corev1.ProtocolTCP}},
				// Probed every second so up sees it Ready soon after it listens.
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(GPUExporterPort)}},
					PeriodSeconds: 1,
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "pod-gpu-resources", MountPath: "/var/lib/kubelet/pod-resources", ReadOnly: true},
					{Name: "gpu-metrics", MountPath: gpuExporterValuesMount, ReadOnly: true},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "pod-gpu-resources", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
					Path: filepath.Join(info.Dir, "kubelet", "root", "pod-resources"), Type: &dirType}}},
				{Name: "gpu-metrics", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
					Path: GPUMetricsDir(info.StateDir), Type: &createType}}},
			},
		},
	}
}

// gpuExporterArgs are the exporter's flags: the node's GPUs in index order and, when one is in
// MIG mode, which one and its slices, so that it serves the devices the device plugin
// advertises (DevicePluginDevices).
func gpuExporterArgs(info RealNodeInfo) []string {
	gpus := info.GPUs
	if info.MIGSlices > 0 {
		gpus++
	}
	args := []string{"--gpus=" + strings.Join(GPUDeviceIDs(info.StateDir, gpus), ",")}
	if info.MIGSlices > 0 {
		args = append(args, "--mig-gpus="+MIGGPUID(info.StateDir, info.GPUs), "--mig-profile="+MIGProfile, "--mig-slices="+strconv.Itoa(info.MIGSlices))
	}
	return append(args, "--values-dir="+gpuExporterValuesMount)
}

// ensureGPUExporter runs the exporter pod on the real node, if it is not there yet, and waits
// until it is Ready.
func ensureGPUExporter(ctx context.Context, cfg Config, cs kubernetes.Interface, info RealNodeInfo, watch ...*proc) error {
	start := time.Now()
	if err := os.MkdirAll(GPUMetricsDir(info.StateDir), 0o755); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: GPUExporterNamespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", GPUExporterNamespace, err)
	}
	// Its own ServiceAccount, as the GPU Operator's: a new namespace's default one comes later,
	// from the controller-manager, and admission refuses pods until it exists.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: GPUExporterLabelValue, Namespace: GPUExporterNamespace}}
	if _, err := cs.CoreV1().ServiceAccounts(GPUExporterNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ServiceAccount %s/%s: %w", GPUExporterNamespace, sa.Name, err)
	}
	pod := gpuExporterPod(info)
	c := &cluster{cfg: cfg}
	if err := c.waitFor(ctx, "the GPU exporter pod "+GPUExporterNamespace+"/"+pod.Name+" Ready", componentStartupTimeout, func(ctx context.Context) (bool, error) {
		got, err := cs.CoreV1().Pods(GPUExporterNamespace).Get(ctx, pod.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err := cs.CoreV1().Pods(GPUExporterNamespace).Create(ctx, pod, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return false, fmt.Errorf("create the GPU exporter pod: %w", err)
			}
			return false, nil
		case err != nil:
			return false, nil
		case got.DeletionTimestamp != nil:
			// A stop still under way: the new pod follows once the old one is gone.
			return false, nil
		case got.Status.Phase == corev1.PodFailed || got.Status.Phase == corev1.PodSucceeded:
			return false, fmt.Errorf("the GPU exporter pod %s", got.Status.Phase)
		}
		return podReady(got), nil
	}, watch...); err != nil {
		return err
	}
	cfg.logf("GPU exporter %s/%s Ready in %s", GPUExporterNamespace, pod.Name, time.Since(start).Round(10*time.Millisecond))
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// runningRealNode is the running real node of the cluster in cfg.StateDir and an admin
// client, for the commands that change what runs on it.
func runningRealNode(cfg *Config) (RealNodeInfo, kubernetes.Interface, error) {
	if err := cfg.Complete(); err != nil {
		return RealNodeInfo{}, nil, err
	}
	info, ok := readNodeInfo(realNodeFile(cfg.StateDir))
	if !ok || !realNodeRunning(info) {
		return RealNodeInfo{}, nil, fmt.Errorf("no real node runs in the cluster in %s (start it with `localcluster up --real-node`)", cfg.StateDir)
	}
	rc, err := RESTConfig(KubeconfigPath(cfg.StateDir))
	if err != nil {
		return RealNodeInfo{}, nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return RealNodeInfo{}, nil, err
	}
	return info, cs, nil
}

// StartGPUExporter runs the GPU exporter on the real node of the running cluster in
// cfg.StateDir again (what up does), after StopGPUExporter; a running one is left as it is.
func StartGPUExporter(ctx context.Context, cfg Config) error {
	info, cs, err := runningRealNode(&cfg)
	if err != nil {
		return err
	}
	return ensureGPUExporter(ctx, cfg, cs, info)
}

// StopGPUExporter removes the GPU exporter pod from the real node of the running cluster in
// cfg.StateDir and waits until it is gone, so tests see a cluster without one. The values
// files stay.
func StopGPUExporter(ctx context.Context, cfg Config) error {
	info, cs, err := runningRealNode(&cfg)
	if err != nil {
		return err
	}
	name := gpuExporterPodName(info.StateDir)
	grace := int64(1)
	err = cs.CoreV1().Pods(GPUExporterNamespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete the GPU exporter pod: %w", err)
	}
	c := &cluster{cfg: cfg}
	if err := c.waitFor(ctx, "the GPU exporter pod "+GPUExporterNamespace+"/"+name+" to be gone", componentStartupTimeout, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(GPUExporterNamespace).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		return err
	}
	cfg.logf("GPU exporter %s/%s stopped", GPUExporterNamespace, name)
	return nil
}

// LockGPUExporter holds the cluster's GPU exporter in its state for tests that run side by
// side (go test runs packages at once): shared while a test needs it up, exclusive while one
// stops it. It blocks until granted; the returned function releases it.
func LockGPUExporter(stateDir string, exclusive bool) (func(), error) {
	f, err := os.OpenFile(filepath.Join(stateDir, "gpu-exporter.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock the GPU exporter: %w", err)
	}
	return func() { f.Close() }, nil
}
