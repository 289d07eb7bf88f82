package tail

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/jobpods"
)

// defaultContainerAnnotation names the container kubectl reads logs from when none is given.
const defaultContainerAnnotation = "kubectl.kubernetes.io/default-container"

// Target is one container whose log is read: a pod of the Job and its rank.
type Target struct {
	Pod       string
	UID       types.UID
	Rank      int
	Container string
	// Node is the pod's node: its kubelet serves the log.
	Node string
	// Started is true once the container has run (its log exists); Pending pods have no log.
	Started bool
	// Terminated is true once the container has stopped: a stream that ends cleanly is then
	// complete.
	Terminated bool
	created    int64
}

// TargetOf picks the container of pod to read: container when given, else the pod's default
// container, else its first. previous asks whether an earlier instance has ended instead.
func TargetOf(pod *corev1.Pod, container string, previous bool) Target {
	t := Target{Pod: pod.Name, UID: pod.UID, Rank: jobpods.Rank(pod), Container: container, Node: pod.Spec.NodeName, created: pod.CreationTimestamp.UnixNano()}
	if t.Container == "" {
		t.Container = pod.Annotations[defaultContainerAnnotation]
	}
	if t.Container == "" && len(pod.Spec.Containers) > 0 {
		t.Container = pod.Spec.Containers[0].Name
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != t.Container {
			continue
		}
		if previous {
			t.Started = cs.LastTerminationState.Terminated != nil
			t.Terminated = t.Started
		} else {
			t.Started = cs.State.Running != nil || cs.State.Terminated != nil
			t.Terminated = cs.State.Terminated != nil
		}
	}
	return t
}

// Targets turns the Job's pods into targets in rank order, keeping only ranks (all when
// empty). Within a rank, older pods (ones that were replaced) come first.
func Targets(pods []corev1.Pod, ranks []int, container string, previous bool) []Target {
	want := map[int]bool{}
	for _, r := range ranks {
		want[r] = true
	}
	var out []Target
	for i := range pods {
		t := TargetOf(&pods[i], container, previous)
		if len(want) > 0 && !want[t.Rank] {
			continue
		}
		out = append(out, t)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Rank != out[j].Rank {
			return out[i].Rank < out[j].Rank
		}
		if out[i].created != out[j].created {
			return out[i].created < out[j].created
		}
		return out[i].Pod < out[j].Pod
	})
	return out
}
