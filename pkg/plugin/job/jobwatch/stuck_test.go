package jobwatch

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/triage"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// TestStucknessSaysOnceAndGivesUp drives the state machine step by step: a finding is said once
// however often it is seen, again only when it changes, and the wait ends with Stuck once the
// job has been stuck, without a break, for the timeout.
func TestStucknessSaysOnceAndGivesUp(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	pending := jobstatus.Result{Status: jobstatus.Pending}
	pull := func(msg string) *triage.Stuck {
		return &triage.Stuck{Rank: 0, Pod: "train-0-abcde", Issue: triage.Issue{Reason: "ImagePullBackOff", Message: msg}}
	}
	var progress bytes.Buffer
	st := &Stuckness{Job: "train", Namespace: "ml", Timeout: time.Minute, Progress: &progress}
	steps := []struct {
		at      time.Duration
		s       *triage.Stuck
		wantErr exitcode.Code
	}{
		{0, nil, exitcode.OK},
		{time.Second, pull("back-off 10s"), exitcode.OK},
		{2 * time.Second, pull("back-off 20s"), exitcode.OK},
		{30 * time.Second, pull("back-off 40s"), exitcode.OK},
		// The rank started: the spell is over, and the next one starts its own count.
		{40 * time.Second, nil, exitcode.OK},
		{50 * time.Second, pull("back-off 10s"), exitcode.OK},
		{60 * time.Second, &triage.Stuck{Rank: 1, Pod: "train-1-fghij", Issue: triage.Issue{Reason: "Unschedulable", Message: "0/4 nodes"}}, exitcode.OK},
		{109 * time.Second, &triage.Stuck{Rank: 1, Pod: "train-1-fghij", Issue: triage.Issue{Reason: "Unschedulable", Message: "0/5 nodes"}}, exitcode.OK},
		{110 * time.Second, &triage.Stuck{Rank: 1, Pod: "train-1-fghij", Issue: triage.Issue{Reason: "Unschedulable", Message: "0/5 nodes"}}, exitcode.Stuck},
	}
	for i, step := range steps {
		if i == 2 {
			if due := st.Due(); !due.Equal(t0.Add(time.Second + time.Minute)) {
				t.Errorf("Due = %v, want a minute after the spell began", due)
			}
		}
		err := st.Observe(t0.Add(step.at), pending, step.s)
		if got := exitcode.Of(err); got != step.wantErr {
			t.Fatalf("step %d (%s): exit code %d (%v), want %d", i, step.at, got, err, step.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "could not start for 1m0s (--stuck-timeout): Unschedulable: 0/5 nodes; see why: kubectl tao diagnose train -n ml") {
			t.Errorf("error = %q", err)
		}
	}
	want := "rank 0 (pod train-0-abcde) cannot start: ImagePullBackOff: back-off 10s; see why: kubectl tao diagnose train -n ml\n" +
		"rank 0 (pod train-0-abcde) cannot start: ImagePullBackOff: back-off 10s; see why: kubectl tao diagnose train -n ml\n" +
		"rank 1 (pod train-1-fghij) cannot start: Unschedulable: 0/4 nodes; see why: kubectl tao diagnose train -n ml\n"
	if progress.String() != want {
		t.Errorf("progress:\n%s\nwant:\n%s", progress.String(), want)
	}
}

// TestStucknessWithoutTimeout: 0 waits forever, and says the finding all the same.
func TestStucknessWithoutTimeout(t *testing.T) {
	var progress bytes.Buffer
	st := &Stuckness{Job: "train", Namespace: "ml", Progress: &progress}
	s := &triage.Stuck{Rank: 0, Pod: "p", Issue: triage.Issue{Reason: "ErrImagePull"}}
	for _, at := range []time.Duration{0, time.Hour, 1000 * time.Hour} {
		if err := st.Observe(time.Unix(0, 0).Add(at), jobstatus.Result{Status: jobstatus.Pending}, s); err != nil {
			t.Fatalf("Observe at %s: %v", at, err)
		}
	}
	if !st.Due().IsZero() {
		t.Errorf("Due = %v without a timeout", st.Due())
	}
	if n := strings.Count(progress.String(), "\n"); n != 1 {
		t.Errorf("said %d lines, want 1:\n%s", n, progress.String())
	}
}

// TestStucknessKueue: a queued job is said to wait in its LocalQueue once and goes on waiting; a
// job Kueue will never admit ends the wait at once with NotAdmitted and Kueue's words.
func TestStucknessKueue(t *testing.T) {
	var progress bytes.Buffer
	st := &Stuckness{Job: "train", Namespace: "ml", Timeout: time.Hour, Progress: &progress}
	// Kueue's words change as other jobs come and go: the queue is said once.
	for i, msg := range []string{"queued in team-a: insufficient unused quota, 16 more needed", "queued in team-a: insufficient unused quota, 8 more needed", "queued in team-a"} {
		queued := jobstatus.Result{Status: jobstatus.Pending, Reason: jobstatus.Queued, Message: msg}
		if err := st.Observe(time.Unix(int64(i), 0), queued, nil); err != nil {
			t.Fatalf("queued: %v", err)
		}
	}
	if got := progress.String(); got != "queued in LocalQueue team-a: waiting for Kueue to admit it; Kueue says: insufficient unused quota, 16 more needed\n" {
		t.Errorf("progress = %q", got)
	}
	progress.Reset()
	never := jobstatus.Result{Status: jobstatus.Pending, Reason: jobstatus.Inadmissible, Message: "LocalQueue team-a points at ClusterQueue gone, which does not exist"}
	err := st.Observe(time.Unix(10, 0), never, triage.StuckOf(nil, nil, never))
	if exitcode.Of(err) != exitcode.NotAdmitted || !strings.Contains(err.Error(), "Inadmissible: LocalQueue team-a points at ClusterQueue gone, which does not exist") {
		t.Errorf("err = %v (code %d), want NotAdmitted with Kueue's reason", err, exitcode.Of(err))
	}
	if !strings.Contains(progress.String(), "Kueue will not admit the job: Inadmissible") {
		t.Errorf("progress = %q", progress.String())
	}
}

// TestStucknessStoppedQueue: a stopped queue is said once when it holds the job, however often
// it is read, once more when it admits again, and never ends the wait.
func TestStucknessStoppedQueue(t *testing.T) {
	const hold = "ClusterQueue cq is stopped (Hold): nothing is admitted until an admin resumes it"
	queued := func(held, words string) jobstatus.Result {
		msg := "queued in team-a"
		if words != "" {
			msg += ": " + words
		}
		return jobstatus.Result{Status: jobstatus.Pending, Reason: jobstatus.Queued, Message: msg, Held: held}
	}
	var progress bytes.Buffer
	st := &Stuckness{Job: "train", Namespace: "ml", Timeout: time.Minute, Progress: &progress}
	steps := []jobstatus.Result{
		queued(hold, hold+"; ClusterQueue cq: 0 of 16 nvidia.com/gpu used in flavor h100, the job needs 16; 1 pending in team-a"),
		queued(hold, hold+"; ClusterQueue cq: 8 of 16 nvidia.com/gpu used in flavor h100, the job needs 16; 2 pending in team-a"),
		queued(hold, hold),
		queued("", "insufficient unused quota, 16 more needed"),
		queued("", "insufficient unused quota, 8 more needed"),
		queued(hold, hold),
	}
	for i, r := range steps {
		// Hours apart: a held queue is not stuck ranks, so --stuck-timeout does not end it.
		if err := st.Observe(time.Unix(int64(i)*3600, 0), r, triage.StuckOf(nil, nil, r)); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	want := "queued in LocalQueue team-a: " + hold + "; still waiting\n" +
		"queued in LocalQueue team-a: its queue admits again; waiting for Kueue to admit it\n" +
		"queued in LocalQueue team-a: " + hold + "; still waiting\n"
	if progress.String() != want {
		t.Errorf("progress:\n%s\nwant:\n%s", progress.String(), want)
	}
	// A job first seen waiting for quota, then held: the queue, then the stop.
	progress.Reset()
	st = &Stuckness{Job: "train", Namespace: "ml", Progress: &progress}
	for _, r := range []jobstatus.Result{queued("", "16 more needed"), queued(hold, hold), queued(hold, hold)} {
		if err := st.Observe(time.Unix(0, 0), r, nil); err != nil {
			t.Fatal(err)
		}
	}
	want = "queued in LocalQueue team-a: waiting for Kueue to admit it; Kueue says: 16 more needed\n" +
		"queued in LocalQueue team-a: " + hold + "; still waiting\n"
	if progress.String() != want {
		t.Errorf("progress:\n%s\nwant:\n%s", progress.String(), want)
	}
}

// A queued job's position is said with the first line and then once per change, never per
// poll; a poll that could not read it (nil) says nothing.
func TestStucknessQueuePosition(t *testing.T) {
	var progress bytes.Buffer
	st := &Stuckness{Job: "train", Namespace: "ml", Progress: &progress}
	at := func(p int32) *jobstatus.Position { return &jobstatus.Position{LocalQueue: p, ClusterQueue: p + 1} }
	for i, pos := range []*jobstatus.Position{at(2), at(2), nil, at(2), at(1), at(1), at(0)} {
		r := jobstatus.Result{Status: jobstatus.Pending, Reason: jobstatus.Queued, Message: "queued in team-a: 16 more needed", Position: pos}
		if err := st.Observe(time.Unix(int64(i), 0), r, nil); err != nil {
			t.Fatal(err)
		}
	}
	want := "queued in LocalQueue team-a at position 3: waiting for Kueue to admit it; Kueue says: 16 more needed\n" +
		"queued in LocalQueue team-a: now at position 2\n" +
		"queued in LocalQueue team-a: now at position 1\n"
	if got := progress.String(); got != want {
		t.Errorf("progress =\n%s\nwant\n%s", got, want)
	}
	// Admitted, then queued again (preempted and requeued): said anew.
	progress.Reset()
	_ = st.Observe(time.Unix(10, 0), jobstatus.Result{Status: jobstatus.Running}, nil)
	_ = st.Observe(time.Unix(11, 0), jobstatus.Result{Status: jobstatus.Pending, Reason: jobstatus.Queued, Message: "queued in team-a", Position: at(0)}, nil)
	if got, want := progress.String(), "queued in LocalQueue team-a at position 1: waiting for Kueue to admit it\n"; got != want {
		t.Errorf("after a requeue: %q, want %q", got, want)
	}
}
