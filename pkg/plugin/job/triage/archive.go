package triage

import (
	"fmt"
	"sort"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
)

// AnalyzeArchive is Analyze for a run whose Job is gone (deleted, TTL'd, or its name reused by
// a newer run): the run's log archive is all the evidence left. The findings are the known
// errors (CUDA out of memory, NCCL) in each rank's last attempt, the rank that stopped first
// as the root, as Analyze reads them when only the pods are gone. Without one, no issue is
// found: nothing left says whether the run failed at all.
func AnalyzeArchive(job, namespace string, arch *Archive) Analysis {
	a := Analysis{
		Job: job, Namespace: namespace, Status: string(jobstatus.Unknown),
		Message:               "the Job is gone: only its log archive is left",
		JobFailureByNodeEvent: []NodeEvent{}, Notes: []string{}, Archive: evidence(arch, true),
	}
	events := archivedEvents(arch)
	if len(events) > 0 {
		a.setFindings(events, 0)
	}
	a.Notes = append(a.Notes, archiveNote(a.Archive, len(events) > 0))
	return a
}

// evidence is arch as an Analysis reports it.
func evidence(arch *Archive, jobGone bool) *ArchiveEvidence {
	ev := &ArchiveEvidence{Archive: *arch, JobGone: jobGone}
	if ev.Ranks == nil {
		ev.Ranks = []ArchivedRank{}
	}
	if r := firstToStop(arch); r != nil {
		ev.FirstToStop = &r.Rank
	}
	return ev
}

// firstToStop is the rank whose archive was last written first: the likeliest to have failed
// first, as its peers usually fail after it. nil when no rank was archived.
func firstToStop(arch *Archive) *ArchivedRank {
	var first *ArchivedRank
	for i := range arch.Ranks {
		if r := &arch.Ranks[i]; first == nil || r.Written.Before(first.Written) {
			first = r
		}
	}
	return first
}

// archivedEvents are the known errors (CUDA out of memory, NCCL) in the archived last lines of
// each rank, earliest written first: the rank that stopped first is the likeliest root cause,
// as with live pods.
func archivedEvents(arch *Archive) []NodeEvent {
	var events []NodeEvent
	for _, r := range arch.Ranks {
		p, line := scanLogs(r.Lines)
		if p == nil {
			continue
		}
		events = append(events, NodeEvent{
			NodeEventName: p.name, Pod: r.Pod, Rank: r.Rank, Message: "the archived log says: " + line,
			Time: timePtr(r.Written), ErrClass: ErrProgram, Suggestion: p.suggestion,
		})
	}
	sort.SliceStable(events, func(i, j int) bool { return before(events[i].Time, events[j].Time) })
	return events
}

// archiveNote says where the findings of a job without pods come from, or, when the archive
// names no known error, what the rank that stopped first printed last.
func archiveNote(ev *ArchiveEvidence, found bool) string {
	gone := "the pods are gone"
	if ev.JobGone {
		gone = fmt.Sprintf("the Job of run %s is gone, its pods and events with it", ev.UID)
	}
	if found {
		if ev.JobGone {
			return gone + ": the findings come from the archived logs in " + ev.URL + " alone"
		}
		return gone + ": the log findings come from the archived logs in " + ev.URL
	}
	note := gone + ", and the archived logs in " + ev.URL + " name no known error"
	if first := firstToStop(&ev.Archive); first != nil {
		if l := lastLine(first.Lines); l != "" {
			note += fmt.Sprintf("; the last line of rank %d, the first to stop: %s", first.Rank, l)
		}
	}
	return note
}
