package jobstatus

import (
	"sort"
	"time"

	batchv1 "k8s.io/api/batch/v1"
)

// Expired returns the finished Jobs that finished before now-olderThan, and the Jobs of
// incomplete submits (IncompleteSubmit) created before then, oldest first. A Job
// being deleted already is left out.
func Expired(jobs []batchv1.Job, now time.Time, olderThan time.Duration) []batchv1.Job {
	type expired struct {
		job batchv1.Job
		at  time.Time
	}
	var found []expired
	for _, j := range jobs {
		if j.DeletionTimestamp != nil {
			continue
		}
		st := WithSubmit(Of(&j, nil), &j, now)
		var t time.Time
		switch {
		case st.Reason == IncompleteSubmit:
			// It never ran, so it never finished: its age is what counts.
			t = j.CreationTimestamp.Time
		case st.Status == Complete || st.Status == Error:
			t = finishedAt(&j)
		default:
			continue
		}
		if !t.IsZero() && now.Sub(t) > olderThan {
			found = append(found, expired{j, t})
		}
	}
	sort.SliceStable(found, func(a, b int) bool { return found[a].at.Before(found[b].at) })
	out := make([]batchv1.Job, 0, len(found))
	for _, e := range found {
		out = append(out, e.job)
	}
	return out
}

// finishedAt is the completion time, or for failed Jobs the time the terminal condition was set.
func finishedAt(j *batchv1.Job) time.Time {
	if j.Status.CompletionTime != nil {
		return j.Status.CompletionTime.Time
	}
	var t time.Time
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobFailed || c.Type == batchv1.JobComplete) && c.LastTransitionTime.After(t) {
			t = c.LastTransitionTime.Time
		}
	}
	return t
}
