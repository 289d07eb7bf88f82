// Package jobpods is the one home of "the pods of a Job": how they are selected, which of them
// the Job really owns, the rank of each, and the paged list that reads them. The selection and
// ownership rules and Rank are pure; List, ListOf and Fetch are the API part.
package jobpods

import (
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// Selector selects the pods of the Job named job by the job-name label the Job controller sets.
// The name, unlike the UID, is known before the Job is read, so the list can go out beside the
// Job's get (one round trip, not two). It also matches the pods of an earlier Job of the same
// name: keep only the Owned ones.
func Selector(job string) string {
	return labels.Set{batchv1.JobNameLabel: job}.String()
}

// UIDSelector selects exactly the pods of the Job with uid, by the controller-uid label. It is
// for watches that must not be held up by a newer Job of the same name (waiting for a deleted
// Job's pods to go); a list that can go out with the Job's get uses Selector.
func UIDSelector(uid types.UID) string {
	return labels.Set{batchv1.ControllerUidLabel: string(uid)}.String()
}

// Owned reports whether pod belongs to the Job with uid: its controller ownerReference is that
// Job, or (a pod whose ownerReference is gone, e.g. orphaned) its controller-uid label is.
func Owned(pod *corev1.Pod, uid types.UID) bool {
	if uid == "" {
		return false
	}
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.UID == uid {
		return true
	}
	return pod.Labels[batchv1.ControllerUidLabel] == string(uid)
}

// Keep returns the pods of pods that the Job with uid owns, in a new slice.
func Keep(pods []corev1.Pod, uid types.UID) []corev1.Pod {
	out := []corev1.Pod{}
	for i := range pods {
		if Owned(&pods[i], uid) {
			out = append(out, pods[i])
		}
	}
	return out
}

// Rank is the pod's completion index; pods of a non-indexed Job are rank 0.
//
// The annotation is read first, the label second: the Job controller has set the
// batch.kubernetes.io/job-completion-index annotation on every pod of an Indexed Job since
// Indexed Jobs exist (1.21), the label of the same name only since 1.28 (PodIndexLabel), and
// both carry the same value when both are there (v1.37 sets both). A value that is not a
// non-negative integer is no index the controller writes (indexes run from 0 to
// completions-1): it is skipped, so a hand-edited label or annotation cannot make a pod
// claim rank -1 and vanish from every rank filter; with neither usable the pod is rank 0.
func Rank(pod *corev1.Pod) int {
	for _, m := range []map[string]string{pod.Annotations, pod.Labels} {
		if v, ok := m[batchv1.JobCompletionIndexAnnotation]; ok {
			if n, err := strconv.Atoi(v); err == nil && n >= 0 {
				return n
			}
		}
	}
	return 0
}
