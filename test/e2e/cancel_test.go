//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func runningPods(ns, job string, want int) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
		if err != nil {
			return false, err
		}
		n := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				n++
			}
		}
		return n == want, nil
	}
}

func TestCancelRemovesJobPodsAndService(t *testing.T) {
	ns := namespace(t)
	if r := tao(t, nil, "submit", "ddp", "-n", ns, "--image", "img", "--gpus", "8", "--nodes", "2",
		"--annotation", "sim.kubectl-tao.dev/fate=run-forever", "--", "true"); r.code != 0 {
		t.Fatalf("submit: %s", r)
	}
	poll(t, 60*time.Second, "two running ranks", runningPods(ns, "ddp", 2))
	r := tao(t, nil, "cancel", "ddp", "-n", ns, "--timeout", "60s")
	if r.code != 0 || r.stdout != "job.batch/ddp canceled\n" {
		t.Fatalf("cancel: %s", r)
	}
	// Success is reported only once everything is gone: no polling needed here.
	assertNoObjects(t, ns)
	contains(t, tao(t, nil, "cancel", "ddp", "-n", ns), 3, "job.batch/ddp not found")
}

func TestCancelWaitsForAStuckPodAndStatusSaysCanceled(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	if r := tao(t, nil, "submit", "stuck", "-n", ns, "--image", "img", "--annotation", "sim.kubectl-tao.dev/fate=run-forever", "--", "true"); r.code != 0 {
		t.Fatalf("submit: %s", r)
	}
	poll(t, 60*time.Second, "the rank to run", runningPods(ns, "stuck", 1))
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=stuck"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods: %v", err)
	}
	pod := pods.Items[0].Name
	// A finalizer keeps the pod terminating, as a pod on a lost node would be.
	hold := `{"metadata":{"finalizers":["e2e.kubectl-tao.dev/hold"]}}`
	if _, err := client.CoreV1().Pods(ns).Patch(ctx, pod, types.MergePatchType, []byte(hold), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	release := func() {
		_, err := client.CoreV1().Pods(ns).Patch(context.Background(), pod, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("releasing %s: %v", pod, err)
		}
	}
	defer release()

	r := tao(t, nil, "cancel", "stuck", "-n", ns, "--timeout", "3s")
	contains(t, r, 8, "still deleting after 3s", "1 pod remains: "+pod+" (Terminating on ")
	if r.stdout != "" {
		t.Fatalf("a timed-out cancel printed success: %s", r)
	}
	st := tao(t, nil, "status", "stuck", "-n", ns, "-o", "json")
	var s struct{ Status string }
	if err := json.Unmarshal([]byte(st.stdout), &s); err != nil || s.Status != "Canceled" {
		t.Fatalf("status while the Job is being deleted: %s", st)
	}
	// Once the pod may go, the foreground delete the first cancel started finishes on its own;
	// a second cancel either waits for it or finds the Job already gone.
	release()
	if r := tao(t, nil, "cancel", "stuck", "-n", ns, "--timeout", "60s"); r.code != 0 && r.code != 3 {
		t.Fatalf("second cancel, after the pod was released: %s", r)
	}
	poll(t, 30*time.Second, "the Job to be gone", func(ctx context.Context) (bool, error) {
		_, err := client.BatchV1().Jobs(ns).Get(ctx, "stuck", metav1.GetOptions{})
		return apierrors.IsNotFound(err), ignoreNotFound(err)
	})
	assertNoObjects(t, ns)
}

func TestDeleteAndPruneFinishedJobs(t *testing.T) {
	ns := namespace(t)
	for _, name := range []string{"done-1", "done-2"} {
		if r := tao(t, nil, "submit", name, "-n", ns, "--image", "img", "--annotation", "sim.kubectl-tao.dev/run-duration=500ms", "--", "true"); r.code != 0 {
			t.Fatalf("submit: %s", r)
		}
	}
	if r := tao(t, nil, "submit", "busy", "-n", ns, "--image", "img", "--annotation", "sim.kubectl-tao.dev/fate=run-forever", "--", "true"); r.code != 0 {
		t.Fatalf("submit: %s", r)
	}
	poll(t, 60*time.Second, "done-1", jobFinished(ns, "done-1", batchv1.JobComplete))
	poll(t, 60*time.Second, "done-2", jobFinished(ns, "done-2", batchv1.JobComplete))

	contains(t, tao(t, nil, "delete", "busy", "-n", ns), 1, "not finished: cancel it")
	if r := tao(t, nil, "delete", "done-1", "-n", ns); r.code != 0 || r.stdout != "job.batch/done-1 deleted\n" {
		t.Fatalf("delete: %s", r)
	}
	if r := tao(t, nil, "prune", "-n", ns, "--older-than", "0s", "--dry-run"); r.code != 0 || r.stdout != "job.batch/done-2 pruned (dry run)\n" {
		t.Fatalf("prune --dry-run: %s", r)
	}
	if r := tao(t, nil, "prune", "-n", ns, "--older-than", "0s"); r.code != 0 || r.stdout != "job.batch/done-2 pruned\n" {
		t.Fatalf("prune: %s", r)
	}
	jobs, err := client.BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		if j.Name != "busy" && j.DeletionTimestamp == nil {
			t.Errorf("job %s survived delete/prune", j.Name)
		}
	}
}
