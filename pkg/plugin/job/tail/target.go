package tail

import (
	"math"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
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
	// Attempt counts the rank's attempts from 1 (see attempts); 0 for a container that has not
	// started (it has no log, so it is no attempt yet).
	Attempt int
	created int64
	// ended is when the container stopped (math.MaxInt64 while it runs or has not started): it
	// orders a rank's pods made within the same second (the API stamps creation to the second).
	ended int64
}

// TargetOf picks the container of pod to read: container when given, else the pod's default
// container, else its first. previous asks whether an earlier instance has ended instead.
func TargetOf(pod *corev1.Pod, container string, previous bool) Target {
	t := Target{Pod: pod.Name, UID: pod.UID, Rank: jobpods.Rank(pod), Container: container, Node: pod.Spec.NodeName,
		created: pod.CreationTimestamp.UnixNano(), ended: math.MaxInt64}
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
			if t.Terminated && !cs.State.Terminated.FinishedAt.IsZero() {
				t.ended = cs.State.Terminated.FinishedAt.UnixNano()
			}
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
	sortTargets(out)
	var a attempts
	a.number(out)
	return out
}

// sortTargets puts targets in rank order and, within a rank, oldest pod first. A rank's pods
// run one after the other, so of two made in the same second the one that ended first (or
// ended, of one still running) is the older.
func sortTargets(ts []Target) {
	sort.SliceStable(ts, func(i, j int) bool {
		if ts[i].Rank != ts[j].Rank {
			return ts[i].Rank < ts[j].Rank
		}
		if ts[i].created != ts[j].created {
			return ts[i].created < ts[j].created
		}
		if ts[i].ended != ts[j].ended {
			return ts[i].ended < ts[j].ended
		}
		return ts[i].Pod < ts[j].Pod
	})
}

// attempts numbers the attempts of each rank: its pods whose container has started (the ones
// with a log), from 1, oldest first. A rank's attempts never overlap (the Job makes a rank's
// next pod once the last one has failed: podReplacementPolicy Failed), so oldest first is the
// order they ran in, which is also how the log archive numbers a rank's objects
// (s3layout.LogArchiveAttempts, by last write): `logs --attempt A` and the file `logs --save`
// writes for attempt A are the same attempt. A pod keeps the number it got first, so that a
// follow that sees an old pod deleted does not renumber the later ones.
type attempts struct {
	of   map[types.UID]int
	last map[int]int // rank -> its attempts numbered so far
}

// number sets the Attempt of each started target of ts, which are in Targets' order.
func (a *attempts) number(ts []Target) {
	if a.of == nil {
		a.of, a.last = map[types.UID]int{}, map[int]int{}
	}
	for i := range ts {
		t := &ts[i]
		if !t.Started {
			t.Attempt = 0
			continue
		}
		n, ok := a.of[t.UID]
		if !ok {
			a.last[t.Rank]++
			n = a.last[t.Rank]
			a.of[t.UID] = n
		}
		t.Attempt = n
	}
}
