package jobpods

import (
	"fmt"
	"sort"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// maxRanksListed bounds the rank list in an error: a 256-rank job should not print 256 lines.
const maxRanksListed = 16

// Ranks is how many ranks job has: its completions when indexed, else 1.
func Ranks(job *batchv1.Job) int {
	if job.Spec.CompletionMode != nil && *job.Spec.CompletionMode == batchv1.IndexedCompletion &&
		job.Spec.Completions != nil && *job.Spec.Completions > 0 {
		return int(*job.Spec.Completions)
	}
	return 1
}

// Resolve picks the pod that serves rank among the job's pods. When the rank has several pods
// (a replaced pod that is still terminating, a failed one kept next to its replacement) it
// picks a running one, preferring pods that are not being deleted, then the newest. A rank
// outside the job or without any pod is NotFound; a rank whose pods are not running is an Error
// naming every rank and its phase, so the user sees at once which ranks are up.
func Resolve(job string, ranks int, pods []corev1.Pod, rank int) (*corev1.Pod, error) {
	byRank := map[int][]*corev1.Pod{}
	for i := range pods {
		r := Rank(&pods[i])
		byRank[r] = append(byRank[r], &pods[i])
	}
	if rank < 0 || rank >= ranks {
		return nil, exitcode.WithCode(exitcode.NotFound, fmt.Errorf("job.batch/%s has no rank %d: its ranks are %s; %s",
			job, rank, rankRange(ranks), summary(byRank)))
	}
	cands := byRank[rank]
	if len(cands) == 0 {
		return nil, exitcode.WithCode(exitcode.NotFound, fmt.Errorf("rank %d of job.batch/%s has no pod (yet); %s", rank, job, summary(byRank)))
	}
	var best *corev1.Pod
	for _, p := range cands {
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		if best == nil || better(p, best) {
			best = p
		}
	}
	if best == nil {
		return nil, fmt.Errorf("rank %d of job.batch/%s is not running (%s); %s", rank, job, podPhases(cands), summary(byRank))
	}
	return best, nil
}

// better reports whether running pod a is a better choice than running pod b.
func better(a, b *corev1.Pod) bool {
	if (a.DeletionTimestamp == nil) != (b.DeletionTimestamp == nil) {
		return a.DeletionTimestamp == nil
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return b.CreationTimestamp.Before(&a.CreationTimestamp)
	}
	return a.Name > b.Name
}

// phase is a pod's phase as a user thinks of it: a pod being deleted is Terminating.
func phase(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "Terminating"
	}
	if p.Status.Phase == "" {
		return string(corev1.PodPending)
	}
	return string(p.Status.Phase)
}

// podPhases names each pod and its phase, oldest first: "pod ddp-1-abc Pending".
func podPhases(pods []*corev1.Pod) string {
	sorted := append([]*corev1.Pod(nil), pods...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].CreationTimestamp.Before(&sorted[j].CreationTimestamp) })
	parts := make([]string, len(sorted))
	for i, p := range sorted {
		parts[i] = "pod " + p.Name + " " + phase(p)
	}
	return strings.Join(parts, ", ")
}

// summary lists the ranks that have pods and each rank's phases ("ranks: 0 Running, 1 Pending"),
// at most maxRanksListed of them.
func summary(byRank map[int][]*corev1.Pod) string {
	if len(byRank) == 0 {
		return "the job has no pods yet (suspended, queued or just created)"
	}
	ranks := make([]int, 0, len(byRank))
	for r := range byRank {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	var parts []string
	for i, r := range ranks {
		if i == maxRanksListed {
			parts = append(parts, fmt.Sprintf("... %d more", len(ranks)-i))
			break
		}
		var phases []string
		seen := map[string]bool{}
		for _, p := range byRank[r] {
			if ph := phase(p); !seen[ph] {
				seen[ph] = true
				phases = append(phases, ph)
			}
		}
		sort.Strings(phases)
		parts = append(parts, fmt.Sprintf("%d %s", r, strings.Join(phases, "+")))
	}
	return "ranks: " + strings.Join(parts, ", ")
}

func rankRange(n int) string {
	if n == 1 {
		return "0 only"
	}
	return fmt.Sprintf("0..%d", n-1)
}
