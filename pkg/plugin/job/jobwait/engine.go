// Package jobwait blocks until a Job reaches a terminal status (Complete, Error, Canceled),
// following it with a watch, reports each change, and turns the outcome into an exit code:
// the engine of `kubectl tao wait` and of `submit --wait`.
package jobwait

import (
	"context"
	"fmt"
	"io"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobwatch"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/outage"
)

// Target names the Job to wait for. With UID set, a Job of the same name but another UID
// counts as the original having been deleted (Canceled).
type Target struct {
	Namespace, Name string
	UID             types.UID
}

// Outcome is where a wait ended: the last status seen, and the last state of the Job (nil if
// it was gone before it could be read).
type Outcome struct {
	Result jobstatus.Result
	Job    *batchv1.Job
}

// Options say how long a wait may last and what may end it early.
type Options struct {
	// Timeout ends the wait with Timeout; 0 waits forever.
	Timeout time.Duration
	// StuckTimeout ends it with Stuck once ranks have been unable to start that long
	// (--stuck-timeout); 0 never does. The first sign is said on progress either way.
	StuckTimeout time.Duration
	// Workload reads Kueue's Workload of a queued job, so that a job Kueue will never admit
	// ends the wait at once (NotAdmitted); nil reads none (the job stays Queued).
	Workload WorkloadReader
}

// Until blocks until the Job reaches a terminal status, ctx ends, o.Timeout passes, or the job
// cannot start (o.StuckTimeout, Kueue's refusal), writing each transition to progress. It reads
// the Job once, then follows it and its pods with jobwatch (a list, then a watch of each, which
// resumes or lists again by itself if the watch breaks or its resourceVersion expires), never
// by polling.
//
// A terminal status is not an error here: use Err on Outcome.Result for the exit code. Errors
// are a missing Job (NotFound), a timeout (Timeout), an interruption or an API failure.
func Until(ctx context.Context, client kubernetes.Interface, t Target, o Options, progress io.Writer) (Outcome, error) {
	job, err := client.BatchV1().Jobs(t.Namespace).Get(ctx, t.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Outcome{Result: jobstatus.Of(nil, nil)}, exitcode.WithCode(exitcode.NotFound,
			fmt.Errorf("job.batch %q not found in namespace %q", t.Name, t.Namespace))
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("reading job.batch/%s: %w", t.Name, err)
	}
	w := &waiter{target: t, progress: progress, workload: o.Workload,
		stuck: jobwatch.Stuckness{Job: t.Name, Namespace: t.Namespace, Timeout: o.StuckTimeout, Progress: progress}}
	if t.UID != "" && job.UID != t.UID {
		w.gone()
		return w.outcome(), nil
	}
	if w.target.UID == "" {
		w.target.UID = job.UID
	}
	if w.observe(job) {
		return w.outcome(), nil
	}

	wctx, cancel := ctx, context.CancelFunc(func() {})
	if o.Timeout > 0 {
		wctx, cancel = context.WithTimeout(ctx, o.Timeout)
	}
	defer cancel()
	// The pods are watched beside the Job, to say (and end the wait) when ranks cannot start;
	// their failures other than an outage are not the wait's to say.
	watcher := jobwatch.Job{Client: client, Namespace: t.Namespace, Name: t.Name, PodSelector: jobpods.UIDSelector(w.target.UID),
		QuietPods: true, Retry: jobwatch.Retry{Reach: outage.New(progress, "waiting for job.batch/"+t.Name, nil), ErrOut: progress,
			Backoff: func() *wait.Backoff { return outage.Backoff(retryFirst, retryCap) }}}
	st := jobwatch.NewState(t.Name)
	st.Job = job
	err = w.follow(wctx, st, watcher.Start(wctx, "", ""))
	switch {
	case err == nil:
		return w.outcome(), nil
	case ctx.Err() != nil:
		return w.outcome(), fmt.Errorf("interrupted while waiting for job.batch/%s (last status: %s): %w",
			t.Name, Describe(w.last()), ctx.Err())
	case wctx.Err() != nil:
		return w.outcome(), exitcode.WithCode(exitcode.Timeout, fmt.Errorf("timed out after %s waiting for job.batch/%s (last status: %s)",
			o.Timeout, t.Name, Describe(w.last())))
	}
	// Stuck ranks or Kueue's refusal: the error carries the exit code.
	return w.outcome(), err
}

// retryFirst and retryCap bound the pause before a failed list or watch is tried again.
const (
	retryFirst = 250 * time.Millisecond
	retryCap   = 4 * time.Second
)

// workloadPoll is how often the Workload of a job waiting in a queue is read again when the
// Job itself does not change: Kueue's verdict lives on the Workload, which is not watched.
const workloadPoll = 30 * time.Second

// follow applies the watches' updates to st until the Job is terminal or gone (nil), ranks
// cannot start or Kueue refuses the job (that error), or ctx ends (its error). Each burst of
// updates is one decision.
func (w *waiter) follow(ctx context.Context, st *jobwatch.State, updates <-chan jobwatch.Update) error {
	poll := time.NewTicker(workloadPoll)
	defer poll.Stop()
	var (
		seen  *batchv1.Job // the state of the Job last observed
		read  *batchv1.Job // the state its Workload was last read for
		wl    *jobstatus.Workload
		first = true
	)
	for {
		polled := false
		if !first {
			var due <-chan time.Time
			if d := w.stuck.Due(); !d.IsZero() {
				due = time.After(time.Until(d))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case u := <-updates:
				st.Apply(u)
			case <-due:
			case <-poll.C:
				polled = true
			}
			_ = st.Drain(updates)
		}
		first = false
		job := st.Job
		if st.JobListed && (job == nil || job.UID != w.target.UID) {
			w.gone()
			return nil
		}
		if job != seen {
			seen = job
			if w.observe(job) {
				return nil
			}
		}
		if job != read || polled {
			read, wl = job, nil
			if jobstatus.WithWorkload(jobstatus.Of(job, nil), job, nil).Reason == jobstatus.Queued && w.workload != nil {
				// A Workload that cannot be read leaves the job Queued: the wait goes on.
				if got, err := w.workload(ctx, job); err == nil {
					wl = got
				}
			}
		}
		if err := w.stuck.Check(time.Now(), st, w.target.UID, wl); err != nil {
			return err
		}
	}
}

// waiter holds what one wait has seen. Its methods run on one goroutine at a time: the caller's
// until the watch starts, then the watch's.
type waiter struct {
	target   Target
	progress io.Writer
	prev     *jobstatus.Result
	job      *batchv1.Job
	// stuck says when ranks cannot start (or Kueue refuses the job), and ends the wait.
	stuck    jobwatch.Stuckness
	workload WorkloadReader
}

// observe records a state of the Job, prints the transition and reports whether it is terminal.
func (w *waiter) observe(job *batchv1.Job) bool {
	if job.Name != w.target.Name || job.Namespace != w.target.Namespace {
		return false
	}
	if w.target.UID != "" && job.UID != w.target.UID {
		w.gone()
		return true
	}
	w.job = job
	// Kueue's Workload is read beside the stuck decision, which ends the wait when Kueue
	// refuses the job; here a job waiting in a queue reads as Queued.
	return w.record(jobstatus.WithWorkload(jobstatus.Of(job, nil), job, nil))
}

// gone records that the Job was deleted (or replaced by another of the same name).
func (w *waiter) gone() {
	r := w.last()
	r.Status, r.Message = jobstatus.Canceled, "the Job was deleted"
	w.record(r)
}

func (w *waiter) record(r jobstatus.Result) bool {
	if line := Transition(w.prev, r); line != "" {
		fmt.Fprintln(w.progress, line)
	}
	w.prev = &r
	return r.Status.Terminal()
}

func (w *waiter) last() jobstatus.Result {
	if w.prev == nil {
		return jobstatus.Result{Status: jobstatus.Unknown}
	}
	return *w.prev
}

func (w *waiter) outcome() Outcome {
	return Outcome{Result: w.last(), Job: w.job}
}

// WorkloadReader reads Kueue's Workload of a job waiting in a queue (kueue.WorkloadOf); nil,
// nil when there is none to read.
type WorkloadReader func(ctx context.Context, job *batchv1.Job) (*jobstatus.Workload, error)
