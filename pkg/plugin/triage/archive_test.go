package triage

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// A failed job whose pods are gone: the archived last lines of each rank's last attempt give
// the log findings the pods would have, the rank that stopped first as the root.
func TestAnalyzeArchivedLogs(t *testing.T) {
	backoff := failedCond("BackoffLimitExceeded", "Job has reached the specified backoff limit", t0.Add(3*time.Minute))
	url := "s3://results/results/gone/uid/.kubectl-tao/logs/"
	arch := &Archive{URL: url, Ranks: []ArchivedRank{
		{Rank: 0, Pod: "gone-0-aaa", Written: t0.Add(2 * time.Minute), Lines: []string{"step 9", "[rank0] ProcessGroupNCCL watchdog: collective operation timed out"}},
		{Rank: 1, Pod: "gone-1-bbb", Written: t0.Add(time.Minute), Lines: []string{"step 9", "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "exiting"}},
	}}
	a := Analyze(Snapshot{Job: testJob("gone", 2, backoff), Archive: arch, Now: t0.Add(time.Hour)})
	if a.ErrClass == nil || *a.ErrClass != ErrProgram || a.FirstFailure == nil {
		t.Fatalf("analysis %+v", a)
	}
	f := a.FirstFailure
	if f.NodeEventName != "CUDAOutOfMemory" || f.Rank != 1 || f.Pod != "gone-1-bbb" || !strings.Contains(f.Message, "the archived log says: torch.cuda.OutOfMemoryError") {
		t.Errorf("first failure %+v", f)
	}
	if len(a.JobFailureByNodeEvent) != 2 || a.JobFailureByNodeEvent[1].NodeEventName != "NCCLError" || a.JobFailureByNodeEvent[1].Rank != 0 {
		t.Errorf("findings %+v", a.JobFailureByNodeEvent)
	}
	if !strings.Contains(a.Suggestion, "CUDA out of memory") {
		t.Errorf("suggestion %q", a.Suggestion)
	}
	if !hasNote(a.Notes, "the pods are gone: the log findings come from the archived logs in "+url) {
		t.Errorf("notes %q", a.Notes)
	}

	// Nothing known in the archive: the answer without pods, and what the first rank to stop said.
	arch.Ranks[0].Lines = []string{"ValueError: bad config"}
	arch.Ranks[1].Lines = []string{"Traceback (most recent call last):", "KeyError: 'lr'", ""}
	a = Analyze(Snapshot{Job: testJob("gone", 2, backoff), Archive: arch, Now: t0.Add(time.Hour)})
	if a.ErrClass == nil || *a.ErrClass != ErrProgram || a.FirstFailure != nil || !strings.Contains(a.Suggestion, "pods are gone") {
		t.Errorf("no known error: %+v", a)
	}
	if !hasNote(a.Notes, "the archived logs in "+url+" name no known error; the last line of rank 1, the first to stop: KeyError: 'lr'") {
		t.Errorf("notes %q", a.Notes)
	}

	// A job that still has pods is read from them: the archive is not looked at.
	pod := podOf("gone", 0).Node("gpu-node-0").Exited(1, "Error", t0.Add(time.Minute)).Val()
	a = Analyze(Snapshot{Job: testJob("gone", 1, backoff), Pods: []corev1.Pod{pod}, Archive: arch, Now: t0.Add(time.Hour)})
	if a.FirstFailure == nil || a.FirstFailure.Pod != pod.Name || hasNote(a.Notes, "archived") {
		t.Errorf("with pods: %+v", a)
	}
}

func hasNote(notes []string, want string) bool {
	for _, n := range notes {
		if strings.Contains(n, want) {
			return true
		}
	}
	return false
}
