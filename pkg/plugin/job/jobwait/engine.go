// Package jobwait blocks until a Job reaches a terminal status (Complete, Error, Canceled),
// following it with a watch, reports each change, and turns the outcome into an exit code:
// the engine of `kubectl tao wait` and of `submit --wait`.
package jobwait

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
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
// cannot start (o.StuckTimeout, Kueue's refusal), writing each transition to progress. It reads the Job once, then follows it with a watch
// (list+watch by field selector through an informer, which relists on its own if the watch
// breaks or its resourceVersion expires), never by polling.
//
// A terminal status is not an error here: use Err on Outcome.Result for the exit code. Errors
// are a missing Job (NotFound), a timeout (Timeout), an interruption or an API failure.
func Until(ctx context.Context, client kubernetes.Interface, t Target, o Options, progress io.Writer) (Outcome, error) {
	timeout := o.Timeout
	jobs := client.BatchV1().Jobs(t.Namespace)
	job, err := jobs.Get(ctx, t.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Outcome{Result: jobstatus.Of(nil, nil)}, exitcode.WithCode(exitcode.NotFound,
			fmt.Errorf("job.batch %q not found in namespace %q", t.Name, t.Namespace))
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("reading job.batch/%s: %w", t.Name, err)
	}
	w := &waiter{target: t, progress: progress}
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

	// The pods are watched beside the Job, to say (and end the wait) when ranks cannot start.
	sctx, stop := context.WithCancelCause(ctx)
	w.stuck = newStuckWatch(client, w.target, o, progress, stop)
	go w.stuck.run(outage.QuietContext(sctx), t.Namespace, w.target.UID)
	defer func() {
		stop(nil)
		<-w.stuck.done
	}()
	w.stuck.setJob(job)

	wctx, cancel := sctx, context.CancelFunc(func() {})
	if timeout > 0 {
		wctx, cancel = context.WithTimeout(sctx, timeout)
	}
	defer cancel()
	selector := fields.OneTermEqualSelector("metadata.name", t.Name).String()
	// The informer's reflector retries failed lists and watches by itself, with client-go's
	// backoff (jittered, capped at 30 s; UntilWithSync has no option to shorten it), and logs
	// each failure as an error: QuietContext moves those to -v=2 and report says an outage
	// once and its end once, and any other failure once until a request works again.
	reach := outage.New(progress, "waiting for job.batch/"+t.Name, nil)
	saidOther := false
	report := func(err error) {
		switch {
		case err == nil:
			reach.OK()
			saidOther = false
		case !reach.Failed(err) && !saidOther && ctx.Err() == nil:
			saidOther = true
			fmt.Fprintf(progress, "watching job.batch/%s: %v (retrying)\n", t.Name, err)
		}
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			l, err := jobs.List(ctx, opts)
			report(err)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			w, err := jobs.Watch(ctx, opts)
			report(err)
			return w, err
		},
	}
	// The precondition covers a Job deleted between the get and the list: no event would
	// ever come for it.
	precondition := func(store cache.Store) (bool, error) {
		obj, exists, err := store.GetByKey(t.Namespace + "/" + t.Name)
		if err != nil {
			return false, err
		}
		if !exists {
			w.gone()
			return true, nil
		}
		j, ok := obj.(*batchv1.Job)
		return ok && w.observe(j), nil
	}
	// The wrapper tells the informer whether client can stream its initial list (fake clients
	// cannot), so it falls back to list+watch where it must.
	_, err = watchtools.UntilWithSync(outage.QuietContext(wctx), cache.ToListWatcherWithWatchListSemantics(lw, client), &batchv1.Job{}, precondition, w.event)
	switch {
	case err == nil:
		return w.outcome(), nil
	case ctx.Err() != nil:
		return w.outcome(), fmt.Errorf("interrupted while waiting for job.batch/%s (last status: %s): %w",
			t.Name, Describe(w.last()), ctx.Err())
	case sctx.Err() != nil:
		// The stuck watch ended the wait: its cause carries the exit code.
		return w.outcome(), context.Cause(sctx)
	case wctx.Err() != nil:
		return w.outcome(), exitcode.WithCode(exitcode.Timeout, fmt.Errorf("timed out after %s waiting for job.batch/%s (last status: %s)",
			timeout, t.Name, Describe(w.last())))
	}
	return w.outcome(), fmt.Errorf("watching job.batch/%s: %w", t.Name, err)
}

// waiter holds what one wait has seen. Its methods run on one goroutine at a time: the caller's
// until the watch starts, then the watch's.
type waiter struct {
	target   Target
	progress io.Writer
	prev     *jobstatus.Result
	job      *batchv1.Job
	stuck    *stuckWatch // nil until the watch starts
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
	if w.stuck != nil {
		w.stuck.setJob(job)
	}
	// Kueue's Workload is read by the stuck watch, which ends the wait when Kueue refuses the
	// job; here a job waiting in a queue reads as Queued.
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

func (w *waiter) event(ev watch.Event) (bool, error) {
	switch ev.Type {
	case watch.Added, watch.Modified:
		if job, ok := ev.Object.(*batchv1.Job); ok {
			return w.observe(job), nil
		}
	case watch.Deleted:
		if job, ok := ev.Object.(*batchv1.Job); ok && job.Name == w.target.Name && job.Namespace == w.target.Namespace {
			if job.UID == w.target.UID || w.target.UID == "" {
				w.gone()
				return true, nil
			}
		}
	case watch.Error:
		return false, errors.New(apierrors.FromObject(ev.Object).Error())
	}
	return false, nil
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
