//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// statusOf runs `status -o json` and decodes it.
func statusOf(t *testing.T, ns, name string) (map[string]any, result) {
	t.Helper()
	r := tao(t, nil, "status", name, "-n", ns, "-o", "json")
	var m map[string]any
	if r.code == 0 {
		if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
			t.Fatalf("status -o json is not JSON: %v\n%s", err, r)
		}
	}
	return m, r
}

func statusIs(t *testing.T, ns, name, want string) func(context.Context) (bool, error) {
	return func(context.Context) (bool, error) {
		m, _ := statusOf(t, ns, name)
		return m["status"] == want, nil
	}
}

// unschedulable is true once the scheduler has tried a pod of the job and found no node for it:
// the event after which "still Pending" is the cluster's verdict, not a matter of time.
func unschedulable(ns, job string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					return true, nil
				}
			}
		}
		return false, nil
	}
}

func submitJob(t *testing.T, ns, name string, args ...string) {
	t.Helper()
	all := append([]string{"submit", name, "-n", ns, "--image", "busybox"}, args...)
	if r := tao(t, nil, append(all, "--", "train")...); r.code != 0 {
		t.Fatalf("submit %s: %s", name, r)
	}
}

func TestWatchStatusThroughAJobsLife(t *testing.T) {
	ns := namespace(t)

	// Every GPU of the cluster (4 nodes x 8) taken by a job that never ends...
	submitJob(t, ns, "hog", "--gpus", "8", "--nodes", "4", "--annotation", "sim.kubectl-tao.dev/fate=run-forever")
	poll(t, 60*time.Second, "hog to run", statusIs(t, ns, "hog", "Running"))
	m, _ := statusOf(t, ns, "hog")
	if m["gpus"] != 8.0 || m["nodes"] != 4.0 || m["ready"] != 4.0 || m["startTime"] == nil || m["completionTime"] != nil {
		t.Errorf("hog: %v", m)
	}
	// ...so the next one stays Pending.
	submitJob(t, ns, "waiter", "--gpus", "8", "--annotation", "sim.kubectl-tao.dev/run-duration=1s")
	poll(t, 60*time.Second, "the scheduler to find no room for waiter", unschedulable(ns, "waiter"))
	if m, r := statusOf(t, ns, "waiter"); m["status"] != "Pending" || m["ready"] != 0.0 {
		t.Fatalf("waiter with no free GPU: %v\n%s", m, r)
	}
	// A wait that times out while the job is stuck exits 8.
	r := tao(t, nil, "wait", "waiter", "-n", ns, "--timeout", "2s")
	contains(t, r, 8, "timed out after 2s waiting for job.batch/waiter")
	if r.stdout != "" {
		t.Errorf("timeout printed on stdout: %s", r)
	}

	// The hog canceled under a running wait: the wait says Canceled (10). The Job is deleted
	// once the wait has said what it saw first, so the deletion happens under it.
	w := taoBackground(t, "wait", "hog", "-n", ns)
	w.waitStderr(t, 60*time.Second, "Running (4/4 ranks)")
	fg := metav1.DeletePropagationForeground
	if err := client.BatchV1().Jobs(ns).Delete(context.Background(), "hog", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	r = w.wait(t, 60*time.Second)
	contains(t, r, 10, "Running -> Canceled", "was canceled")
	if r.stdout != "job.batch/hog Canceled\n" {
		t.Errorf("wait stdout: %s", r)
	}

	// With the GPUs free again the waiter runs and completes; wait exits 0.
	r = tao(t, nil, "wait", "job.batch/waiter", "-n", ns, "--timeout", "90s")
	contains(t, r, 0, "-> Complete")
	if r.stdout != "job.batch/waiter Complete\n" {
		t.Errorf("wait stdout: %s", r)
	}
	if m, r := statusOf(t, ns, "waiter"); m["status"] != "Complete" || m["succeeded"] != 1.0 || m["completionTime"] == nil {
		t.Errorf("waiter after the end: %v\n%s", m, r)
	}
	r = tao(t, nil, "status", "waiter", "-n", ns)
	contains(t, r, 0, "Complete", "1/1 ranks succeeded")

	// A missing Job is Unknown, exit 3.
	r = tao(t, nil, "status", "nope", "-n", ns)
	contains(t, r, 3, `job.batch "nope" not found`, "status Unknown")
}

func TestWatchOOMAndNodeSelector(t *testing.T) {
	ns := namespace(t)
	submitJob(t, ns, "oom", "--gpus", "1", "--nodes", "2", "--annotation", "sim.kubectl-tao.dev/fate=oom")
	r := tao(t, nil, "wait", "oom", "-n", ns, "--timeout", "90s")
	contains(t, r, 9, "-> Error", "job.batch/oom failed")
	if r.stdout != "job.batch/oom Error\n" {
		t.Errorf("wait stdout: %s", r)
	}
	if m, _ := statusOf(t, ns, "oom"); m["status"] != "Error" || m["failed"].(float64) < 1 {
		t.Errorf("oom: %v", m)
	}

	// No node has the label: Pending for good.
	submitJob(t, ns, "nowhere", "--gpus", "1", "--node-selector", "pool=none", "--no-capacity-check")
	poll(t, 60*time.Second, "the scheduler to find no node for nowhere", unschedulable(ns, "nowhere"))
	if m, r := statusOf(t, ns, "nowhere"); m["status"] != "Pending" {
		t.Errorf("nowhere: %v\n%s", m, r)
	}

	// submit --wait of a run-forever job: submit itself waits; stopped by its own timeout here.
	r = tao(t, nil, "submit", "quick", "-n", ns, "--image", "busybox", "--gpus", "1", "--wait",
		"--annotation", "sim.kubectl-tao.dev/run-duration=1s", "--", "train")
	contains(t, r, 0, "-> Complete")
	if r.stdout != "job.batch/quick created\njob.batch/quick Complete\n" {
		t.Errorf("submit --wait stdout: %s", r)
	}
}

func TestWatchList(t *testing.T) {
	ns := namespace(t)
	submitJob(t, ns, "a", "--gpus", "2", "--nodes", "2", "--label", "team=vision", "--annotation", "sim.kubectl-tao.dev/fate=run-forever")
	submitJob(t, ns, "b", "--gpus", "1", "--annotation", "sim.kubectl-tao.dev/run-duration=1s")
	// A Job kubectl-tao did not make is not listed.
	if _, err := client.BatchV1().Jobs(ns).Create(context.Background(), foreignJob(ns), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, 60*time.Second, "b to complete", statusIs(t, ns, "b", "Complete"))
	poll(t, 60*time.Second, "a to run", statusIs(t, ns, "a", "Running"))

	r := tao(t, nil, "list", "-n", ns, "-o", "json")
	var l struct {
		APIVersion, Kind string
		Items            []struct {
			APIVersion, Kind string
			Metadata         metav1.ObjectMeta
		}
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &l) != nil {
		t.Fatalf("list -o json: %s", r)
	}
	if l.Kind != "List" || l.APIVersion != "v1" || len(l.Items) != 2 || l.Items[0].Kind != "Job" || l.Items[0].APIVersion != "batch/v1" {
		t.Fatalf("list -o json: %+v", l)
	}

	r = tao(t, nil, "list", "-n", ns, "-o", "custom-columns=NAME:.metadata.name,GPU:.spec.template.spec.containers[0].resources.limits.nvidia\\.com/gpu", "--no-headers")
	if r.code != 0 || r.stdout != "a      2\nb      1\n" && strings.Join(strings.Fields(r.stdout), " ") != "a 2 b 1" {
		t.Fatalf("custom-columns: %s", r)
	}
	r = tao(t, nil, "list", "-n", ns)
	contains(t, r, 0, "NAME", "STATUS", "GPUS", "NODES", "AGE")
	if !strings.Contains(r.stdout, "Running") || !strings.Contains(r.stdout, "2x2") || !strings.Contains(r.stdout, "Complete") || strings.Contains(r.stdout, "foreign") {
		t.Errorf("list: %s", r)
	}
	r = tao(t, nil, "get", "-n", ns, "-l", "team=vision", "-o", "name")
	if r.code != 0 || r.stdout != "job.batch/a\n" {
		t.Errorf("get -l: %s", r)
	}
	r = tao(t, nil, "list", "-A", "-o", "wide")
	contains(t, r, 0, "NAMESPACE", "IMAGE", "COMMAND", ns, "busybox")
}

func foreignJob(ns string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "c", Image: "busybox"}},
			}},
		},
	}
}
