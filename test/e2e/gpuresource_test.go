//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// On a cluster of whole-GPU and MIG-sliced nodes (the launcher's `mig`, the MIG mixed
// strategy's nvidia.com/mig-1g.10gb), --gpu-resource takes a job to the sliced nodes, the
// capacity guard counts slices per node, an unknown resource is refused with the list the
// cluster offers, and capacity shows both.
func TestGPUResourceMIG(t *testing.T) {
	const slice = "nvidia.com/mig-1g.10gb"
	out, err := launcher(t, "mig", "--mig-nodes", "2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Later tests expect whole GPUs on every node, as up made them.
		if _, err := launcher(t, "mig", "--mig-nodes", "0"); err != nil {
			t.Error(err)
		}
	})
	perNode := map[string]int64{} // the sliced nodes and their slices
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, resource, _ := strings.Cut(line, "\t")
		if resource != slice {
			continue
		}
		n, err := client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		q := n.Status.Allocatable[slice]
		perNode[name] = q.Value()
	}
	if len(perNode) != 2 {
		t.Fatalf("mig --mig-nodes 2 sliced %v:\n%s", perNode, out)
	}
	var most int64
	for _, n := range perNode {
		most = max(most, n)
	}

	ns := namespace(t)
	r := tao(t, nil, "submit", "slices", "-n", ns, "--image", "busybox", "--gpus", "2", "--gpu-resource", slice,
		"--annotation", "sim.kubectl-tao.dev/fate=run-forever", "--", "python", "train.py")
	if r.code != 0 || r.stdout != "job.batch/slices created\n" {
		t.Fatalf("submit: %s", r)
	}
	var pod corev1.Pod
	poll(t, 60*time.Second, "the rank of slices running", func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{"job-name": "slices"}.String()})
		if err != nil || len(list.Items) != 1 {
			return false, err
		}
		pod = list.Items[0]
		return pod.Status.Phase == corev1.PodRunning, nil
	})
	if _, ok := perNode[pod.Spec.NodeName]; !ok {
		t.Errorf("the rank of 2 slices runs on %s, not on a sliced node (%v)", pod.Spec.NodeName, perNode)
	}
	if q := pod.Spec.Containers[0].Resources.Limits[slice]; q.Value() != 2 {
		t.Errorf("the rank's limits are %v", pod.Spec.Containers[0].Resources.Limits)
	}
	contains(t, tao(t, nil, "list", "-n", ns), 0, "2x1")

	refused := namespace(t)
	contains(t, tao(t, nil, "submit", "big", "-n", refused, "--image", "img", "--gpus", fmt.Sprint(most+1), "--gpu-resource", slice, "--", "true"),
		7, fmt.Sprintf("the job needs 1 rank of %d %s each, but a rank cannot span nodes", most+1, slice))
	contains(t, tao(t, nil, "submit", "big", "-n", refused, "--image", "img", "--gpu-resource", "nvidia.com/mig-3g.40gb", "--", "true"),
		7, "no node of the cluster advertises nvidia.com/mig-3g.40gb; the GPU resources it has are nvidia.com/gpu (", ", "+slice+" (")
	assertNoObjects(t, refused)

	r = tao(t, nil, "capacity")
	contains(t, r, 0, "MIG-1G.10GB")
	for name, n := range perNode {
		free := n
		if name == pod.Spec.NodeName {
			free -= 2
		}
		contains(t, r, 0, fmt.Sprintf("%d/%d", free, n))
	}
}
