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
	// The Job is there: the archive is the pods' stand-in, not all the evidence.
	if a.Archive == nil || a.Archive.JobGone || a.Archive.FirstToStop == nil || *a.Archive.FirstToStop != 1 || len(a.Archive.Ranks) != 2 {
		t.Errorf("archive evidence %+v", a.Archive)
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
	if a.FirstFailure == nil || a.FirstFailure.Pod != pod.Name || hasNote(a.Notes, "archived") || a.Archive != nil {
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

// A run whose Job is gone: the archive is all there is. Its known errors are the findings,
// earliest written first; the report says the Job is gone and which rank stopped first.
func TestAnalyzeArchiveOfAGoneJob(t *testing.T) {
	url := "s3://results/results/gone/run-1/.kubectl-tao/logs/"
	oom := "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
	nccl := "[rank0] ProcessGroupNCCL watchdog: collective operation timed out"
	for _, tc := range []struct {
		name        string
		ranks       []ArchivedRank
		wantClass   string // "" for none
		wantFirst   string // the first failure's event, "" for none
		wantEvents  int
		wantStopped int // the rank that stopped first, -1 for none
		wantNote    string
	}{
		{
			name: "OOM then NCCL",
			ranks: []ArchivedRank{
				{Rank: 0, Pod: "gone-0-a", Written: t0.Add(2 * time.Minute), Lines: []string{"step 9", nccl}},
				{Rank: 1, Pod: "gone-1-a", Written: t0.Add(time.Minute), Lines: []string{"step 9", oom, "exiting"}},
			},
			wantClass: ErrProgram, wantFirst: "CUDAOutOfMemory", wantEvents: 2, wantStopped: 1,
			wantNote: "the Job of run run-1 is gone, its pods and events with it: the findings come from the archived logs in " + url + " alone",
		},
		{
			name: "NCCL alone, the rank that stopped first said nothing known",
			ranks: []ArchivedRank{
				{Rank: 0, Pod: "gone-0-a", Written: t0.Add(time.Minute), Lines: []string{"KeyError: 'lr'"}},
				{Rank: 1, Pod: "gone-1-a", Written: t0.Add(2 * time.Minute), Lines: []string{nccl}},
			},
			wantClass: ErrProgram, wantFirst: "NCCLError", wantEvents: 1, wantStopped: 0,
			wantNote: "the findings come from the archived logs in " + url + " alone",
		},
		{
			name: "no known error: no issue, and what the first rank to stop printed last",
			ranks: []ArchivedRank{
				{Rank: 0, Pod: "gone-0-a", Written: t0.Add(2 * time.Minute), Lines: []string{"done"}},
				{Rank: 1, Pod: "gone-1-a", Written: t0.Add(time.Minute), Lines: []string{"Traceback (most recent call last):", "KeyError: 'lr'", ""}},
			},
			wantStopped: 1,
			wantNote:    "the Job of run run-1 is gone, its pods and events with it, and the archived logs in " + url + " name no known error; the last line of rank 1, the first to stop: KeyError: 'lr'",
		},
		{
			name: "no rank archived", wantStopped: -1,
			wantNote: "the Job of run run-1 is gone, its pods and events with it, and the archived logs in " + url + " name no known error",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := AnalyzeArchive("gone", "ml", &Archive{URL: url, UID: "run-1", Ranks: tc.ranks})
			if a.Job != "gone" || a.Namespace != "ml" || a.Status != "Unknown" || a.JobFailure != "" {
				t.Errorf("job %q/%q, status %q, failure %q", a.Namespace, a.Job, a.Status, a.JobFailure)
			}
			switch {
			case tc.wantClass == "" && (a.ErrClass != nil || a.FirstFailure != nil || a.Suggestion != ""):
				t.Errorf("want no issue, got class %v, first %+v, suggestion %q", a.ErrClass, a.FirstFailure, a.Suggestion)
			case tc.wantClass != "" && (a.ErrClass == nil || *a.ErrClass != tc.wantClass || a.FirstFailure == nil || a.FirstFailure.NodeEventName != tc.wantFirst):
				t.Errorf("want %s %s first, got class %v, first %+v", tc.wantClass, tc.wantFirst, a.ErrClass, a.FirstFailure)
			}
			if len(a.JobFailureByNodeEvent) != tc.wantEvents {
				t.Errorf("%d findings, want %d: %+v", len(a.JobFailureByNodeEvent), tc.wantEvents, a.JobFailureByNodeEvent)
			}
			ev := a.Archive
			if ev == nil || !ev.JobGone || ev.UID != "run-1" || ev.URL != url || ev.Ranks == nil || len(ev.Ranks) != len(tc.ranks) {
				t.Fatalf("archive evidence %+v", ev)
			}
			stopped := -1
			if ev.FirstToStop != nil {
				stopped = *ev.FirstToStop
			}
			if stopped != tc.wantStopped {
				t.Errorf("first to stop: rank %d (-1: none), want %d", stopped, tc.wantStopped)
			}
			if len(a.Notes) != 1 || !strings.Contains(a.Notes[0], tc.wantNote) {
				t.Errorf("notes %q, want one with %q", a.Notes, tc.wantNote)
			}
		})
	}
}
