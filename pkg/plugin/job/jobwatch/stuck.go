package jobwatch

import (
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/triage"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// Stuckness follows whether a job cannot start, for a command that waits on it (wait, logs -f,
// submit --wait|--follow), the one home of that decision, fed by a Job's State (Check): it says
// a finding once on progress (again only when it changes), and turns one that lasts Timeout,
// or Kueue's refusal, into the command's error. Which pods cannot start is triage.StuckOf's to
// judge, by the rules replicas and diagnose share. The time is the caller's, so it is a state
// machine a test drives step by step.
type Stuckness struct {
	Job, Namespace string
	// Timeout is --stuck-timeout; 0 never gives up on stuck ranks.
	Timeout  time.Duration
	Progress io.Writer

	said   *triage.Stuck
	since  time.Time // when the job became stuck (zero: it is not)
	queued string    // the LocalQueue last said
	held   string    // what held it when last said (jobstatus.Result.Held)
	// position is its LocalQueue position last said (1-based), 0 when none was.
	position int32
}

// Observe records what the job looks like at now: r its status (with Kueue's reason where there
// is one) and s what triage.StuckOf found. It returns the error that ends the wait, if any.
func (st *Stuckness) Observe(now time.Time, r jobstatus.Result, s *triage.Stuck) error {
	if r.Reason == jobstatus.Queued && s == nil {
		// Said once per queue: Kueue's words (how much quota is missing) change as other jobs
		// come and go, the queue does not. A stopped or inactive queue is said once when it
		// stops, and once more if it admits again before the job starts (the wait goes on in
		// between: an admin's stop is not a refusal).
		// Its position is said with the first line, then once per change (Kueue's visibility
		// API, read with the Workload): a position that cannot be read says nothing.
		q, words := queued(r.Message)
		var pos int32
		if r.Position != nil {
			pos = jobstatus.Human(r.Position.LocalQueue)
		}
		at := ""
		if pos != 0 {
			at = fmt.Sprintf(" at position %d", pos)
		}
		line := ""
		switch {
		case r.Held != "" && (q != st.queued || r.Held != st.held):
			line = fmt.Sprintf("queued in LocalQueue %s%s: %s; still waiting", q, at, r.Held)
		case q != st.queued:
			line = fmt.Sprintf("queued in LocalQueue %s%s: waiting for Kueue to admit it", q, at)
			if words != "" {
				line += "; Kueue says: " + words
			}
		case r.Held == "" && st.held != "":
			line = fmt.Sprintf("queued in LocalQueue %s%s: its queue admits again; waiting for Kueue to admit it", q, at)
		case pos != 0 && pos != st.position:
			line = fmt.Sprintf("queued in LocalQueue %s: now at position %d", q, pos)
		}
		if line != "" {
			fmt.Fprintln(st.Progress, line)
		}
		st.queued, st.held = q, r.Held
		if pos != 0 && line != "" {
			st.position = pos
		}
	} else if r.Reason != jobstatus.Queued {
		st.queued, st.held, st.position = "", "", 0
	}
	if s == nil {
		st.said, st.since = nil, time.Time{}
		return nil
	}
	if st.said == nil {
		st.since = now
	}
	if !s.Same(st.said) {
		fmt.Fprintln(st.Progress, s.Line(st.Job, st.Namespace))
	}
	st.said = s
	if s.NotAdmitted {
		return exitcode.WithCode(exitcode.NotAdmitted, fmt.Errorf("job.batch/%s will not be admitted by Kueue: %s: %s",
			st.Job, s.Issue.Reason, s.Issue.Message))
	}
	if st.Timeout > 0 && now.Sub(st.since) >= st.Timeout {
		return exitcode.WithCode(exitcode.Stuck, fmt.Errorf("job.batch/%s could not start for %s (--stuck-timeout): %s: %s; see why: kubectl tao diagnose %s -n %s",
			st.Job, st.Timeout, s.Issue.Reason, s.Issue.Message, st.Job, st.Namespace))
	}
	return nil
}

// Check observes the job as st shows it at now: the Job with uid and its pods, with wl the
// Kueue Workload of a queued job (nil when not read: the job then reads as Queued). It returns
// the error that ends the wait, if any. Nothing is decided before the Job is seen.
func (st *Stuckness) Check(now time.Time, s *State, uid types.UID, wl *jobstatus.Workload) error {
	if s.Job == nil {
		return nil
	}
	r := jobstatus.WithWorkload(jobstatus.Of(s.Job, nil), s.Job, wl)
	return st.Observe(now, r, triage.StuckOf(s.Job, s.Owned(uid), r))
}

// Due is when the current stuck spell reaches Timeout: the caller looks again then, even if
// nothing changes. Zero when nothing is stuck or there is no timeout.
func (st *Stuckness) Due() time.Time {
	if st.said == nil || st.Timeout <= 0 {
		return time.Time{}
	}
	return st.since.Add(st.Timeout)
}

// queued splits jobstatus's message of a Queued job, "queued in Q[: Kueue's words]", into the
// LocalQueue (a name, so without ": ") and Kueue's words.
func queued(msg string) (queue, words string) {
	queue, words, _ = strings.Cut(strings.TrimPrefix(msg, "queued in "), ": ")
	return queue, words
}
