//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
			cur, err := client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
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
			if _, err := client.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
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
	poll(t, 30*time.Second, "both ranks to run on the tainted GPU nodes", func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=gpu"})
		if err != nil {
			return false, err
		}
		n := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				n++
			}
		}
		return n == 2, nil
	})
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
