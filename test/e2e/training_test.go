//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// taintAll puts taint on every node for the duration of the test.
func taintAll(t *testing.T, taint corev1.Taint) {
	t.Helper()
	ctx := context.Background()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	update := func(add bool) error {
		for _, n := range nodes.Items {
			if err := setTaint(ctx, n.Name, taint, add); err != nil {
				return err
			}
		}
		return nil
	}
	if err := update(true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := update(false); err != nil {
			t.Errorf("removing taint %s: %v", taint.Key, err)
		}
	})
}

// setTaint puts taint on the node (replacing one with its key), or takes it off. A real kubelet
// writes its Node's status every few seconds, moving the resourceVersion the Update is bound to,
// so a conflict is retried on a fresh read: a taint left behind would keep every later test's
// pods off the real node.
func setTaint(ctx context.Context, node string, taint corev1.Taint, add bool) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var kept []corev1.Taint
		for _, tt := range cur.Spec.Taints {
			if tt.Key != taint.Key {
				kept = append(kept, tt)
			}
		}
		if add {
			kept = append(kept, taint)
		}
		cur.Spec.Taints = kept
		_, err = client.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

func podPhase(ns, job string) func(context.Context) (corev1.PodPhase, *corev1.Pod, error) {
	return func(ctx context.Context) (corev1.PodPhase, *corev1.Pod, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
		if err != nil || len(pods.Items) == 0 {
			return "", nil, err
		}
		return pods.Items[0].Status.Phase, &pods.Items[0], nil
	}
}

func TestTaintedNodesNeedTheToleration(t *testing.T) {
	ns := namespace(t)
	taintAll(t, corev1.Taint{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule})

	refused := tao(t, nil, "submit", "untolerated", "-n", ns, "--image", "img", "--", "true")
	contains(t, refused, 7, "carry taints the pods do not tolerate (for example dedicated=ml:NoSchedule)", "--toleration")
	assertNoObjects(t, ns)

	// Past the capacity check, the real scheduler keeps the pod off every node.
	if r := tao(t, nil, "submit", "forced", "-n", ns, "--image", "img", "--no-capacity-check", "--", "true"); r.code != 0 {
		t.Fatalf("submit --no-capacity-check: %s", r)
	}
	phase := podPhase(ns, "forced")
	poll(t, 30*time.Second, "the scheduler to refuse the untolerating pod", func(ctx context.Context) (bool, error) {
		_, pod, err := phase(ctx)
		if err != nil || pod == nil {
			return false, err
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	// diagnose names the taint from the real scheduler's message, and the flag that tolerates it.
	diag := tao(t, nil, "diagnose", "forced", "-n", ns)
	contains(t, diag, 0, "UntoleratedTaint", "--toleration dedicated=ml:NoSchedule")

	ok := tao(t, nil, "submit", "tolerated", "-n", ns, "--image", "img", "--toleration", "dedicated=ml:NoSchedule",
		"--annotation", "sim.kubectl-tao.dev/fate=run-forever", "--", "true")
	if ok.code != 0 {
		t.Fatalf("submit with toleration: %s", ok)
	}
	running := podPhase(ns, "tolerated")
	poll(t, 30*time.Second, "the tolerating pod to run", func(ctx context.Context) (bool, error) {
		p, _, err := running(ctx)
		return p == corev1.PodRunning, err
	})
}

func TestGPUTaintIsToleratedByDefault(t *testing.T) {
	ns := namespace(t)
	taintAll(t, corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule})
	r := tao(t, nil, "submit", "gpu", "-n", ns, "--image", "img", "--gpus", "8", "--nodes", "2", "--one-rank-per-node",
		"--cpu", "8", "--memory", "64Gi", "--annotation", "sim.kubectl-tao.dev/fate=run-forever", "--", "true")
	if r.code != 0 {
		t.Fatalf("submit: %s", r)
	}
	poll(t, 30*time.Second, "both ranks to run on the tainted GPU nodes", runningPods(ns, "gpu", 2))
	opted := tao(t, nil, "submit", "opted-out", "-n", ns, "--image", "img", "--no-gpu-toleration", "--", "true")
	contains(t, opted, 7, "nvidia.com/gpu=present:NoSchedule")
}

func TestSubmitResourcesAreCheckedAgainstNodes(t *testing.T) {
	ns := namespace(t)
	// Each simulated node has 96 CPUs: two 64-CPU ranks cannot share one, and four do not fit.
	r := tao(t, nil, "submit", "cpu-heavy", "-n", ns, "--image", "img", "--gpus", "1", "--nodes", "5", "--cpu", "64", "--", "true")
	contains(t, r, 7, "can hold only 4 such ranks", "the cpu a rank asks for is the limit (lower --cpu)")
	r = tao(t, nil, "submit", "shm-heavy", "-n", ns, "--image", "img", "--gpus", "1", "--shm-size", "2Ti", "--", "true")
	contains(t, r, 7, "the memory a rank asks for is the limit")
	assertNoObjects(t, ns)
}

func TestVolumeAndSpecFile(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	// A statically bound claim: the real PV controller binds it, the real scheduler checks it.
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-results"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + ns}},
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: "results"},
		},
	}
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "results", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: new(string),
			VolumeName:       pv.Name,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}},
		},
	}
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(t.TempDir(), "train.yaml")
	if err := os.WriteFile(spec, []byte("train:\n  num_epochs: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := tao(t, nil, "submit", "dino", "-n", ns, "--image", "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt", "--gpus", "1",
		"--volume", "results:/results", "--file", spec+":/specs/train.yaml",
		"--annotation", "sim.kubectl-tao.dev/run-duration=1s", "--", "dino train -e /specs/train.yaml")
	if r.code != 0 || r.stdout != "job.batch/dino created\nconfigmap/dino-files created\n" {
		t.Fatalf("submit: %s", r)
	}
	poll(t, 60*time.Second, "the job with a volume and a spec file to complete", jobFinished(ns, "dino", batchv1.JobComplete))
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "dino-files", metav1.GetOptions{})
	if err != nil || cm.Data["train.yaml"] != "train:\n  num_epochs: 3\n" || len(cm.OwnerReferences) != 1 {
		t.Fatalf("configmap: %v %+v", err, cm)
	}
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=dino"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods: %v %d", err, len(pods.Items))
	}
	c := pods.Items[0].Spec.Containers[0]
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.SubPath
	}
	if sub, ok := mounts["/specs/train.yaml"]; !ok || sub != "train.yaml" {
		t.Errorf("spec file mount = %v", mounts)
	}
	if _, ok := mounts["/results"]; !ok {
		t.Errorf("no /results mount: %v", mounts)
	}
	found := false
	for _, e := range c.Env {
		found = found || (e.Name == "TAO_RESULTS_ROOT" && e.Value == "/results")
	}
	if !found {
		t.Errorf("TAO_RESULTS_ROOT not set: %v", c.Env)
	}
}
