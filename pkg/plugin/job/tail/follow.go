package tail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobwatch"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/outage"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

// tailer follows one container. Its cursor belongs to its goroutine until done is closed.
type tailer struct {
	target     Target
	cancel     context.CancelFunc
	done       chan struct{}
	cursor     Cursor
	terminated atomic.Bool // the container has stopped (from the pod watch)
	complete   atomic.Bool // the stream ended after the container stopped: nothing more to read
	gone       bool        // the pod was deleted; owned by the Follow loop
}

// Follow streams every selected pod's log at once until the Job reaches a terminal status, and
// returns that status. Pods that appear later, or replace others, are picked up from a watch;
// a dropped stream is reopened from its last line without repeating or losing any. Following
// never relies on the server ending a stream: when the Job is terminal, the streams are stopped
// and each pod is read one last time from its last line, so that the final lines are not lost.
// Two servers need that: a real kubelet ends a stream when its container exits, but the Job can
// turn terminal before that end has been read (or after a stream was cut and not yet reopened);
// a simulated kubelet (KWOK) never ends a followed stream at all.
//
// A canceled ctx (Ctrl-C) stops following and returns ctx's error.
func (e *Engine) Follow(ctx context.Context, cfg Config) (jobstatus.Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := e.newFollower(cfg)
	// One Job list and one pod list, in parallel: the streams start from them at once, not
	// after a watch has synced. Watches then continue from each list's resourceVersion, so no
	// change in between is missed.
	jobs, jobRV, pods, podRV, jobErr, podErr := f.watch.List(ctx)
	if jobErr != nil {
		return jobstatus.Result{}, fmt.Errorf("reading job.batch/%s: %w", cfg.Job, jobErr)
	}
	if podErr != nil {
		return jobstatus.Result{}, listErr(cfg, podErr)
	}
	f.st.SetJobs(jobs)
	f.st.SetPods(pods)
	res, done, err := f.jobState()
	if err != nil {
		return res, err
	}
	if done {
		// Already over: one read of each pod, from the list just made.
		return res, f.lastRead(ctx, pods)
	}
	// Streams are canceled apart from the watches: the last read needs them stopped first.
	streamCtx, stopStreams := context.WithCancel(ctx)
	defer stopStreams()
	f.stopStreams = func() {
		stopStreams()
		f.wait()
	}
	if err := f.reconcile(streamCtx); err != nil {
		return res, err
	}
	if err := f.checkStuck(); err != nil {
		f.stopStreams()
		return res, err
	}
	return f.run(ctx, streamCtx, f.watch.Start(ctx, jobRV, podRV))
}

func (e *Engine) newFollower(cfg Config) *follower {
	reach := outage.New(e.ErrOut, "following job.batch/"+cfg.Job, e.Clock)
	return &follower{e: e, cfg: cfg, out: &syncWriter{w: e.Out}, tailers: map[types.UID]*tailer{},
		st:    jobwatch.NewState(cfg.Job),
		reach: reach,
		watch: jobwatch.Job{Client: e.Client, Namespace: cfg.Namespace, Name: cfg.Job, PodSelector: jobpods.Selector(cfg.Job),
			Retry: jobwatch.Retry{Reach: reach, ErrOut: e.ErrOut, Backoff: e.backoff}},
		stuck: jobwatch.Stuckness{Job: cfg.Job, Namespace: cfg.Namespace, Timeout: cfg.StuckTimeout, Progress: e.ErrOut}}
}

// run follows the watches' updates until the Job is over (then the last read), ranks cannot
// start (Stuck), or ctx ends. Each burst of updates is one decision (step).
func (f *follower) run(ctx, streamCtx context.Context, updates <-chan jobwatch.Update) (jobstatus.Result, error) {
	defer func() {
		if f.drain.ticker != nil {
			f.drain.ticker.Stop()
		}
	}()
	for {
		if err := f.await(ctx, updates); err != nil {
			f.stopStreams()
			return jobstatus.Result{}, err
		}
		// Apply whatever else is queued before deciding: one decision per burst of events.
		_ = f.st.Drain(updates)
		res, done, err := f.step(streamCtx)
		switch {
		case err != nil:
			return res, err
		case !done:
			continue
		}
		f.stopStreams()
		// A fresh list: the pod watch may lag the Job's.
		pods, _, err := f.e.listPods(ctx, f.cfg)
		if err != nil {
			return res, err
		}
		return res, f.lastRead(ctx, pods)
	}
}

// await blocks until an update comes (and applies it), a timer of the follow fires, or ctx
// ends (its error). A job whose ranks cannot start is looked at again when --stuck-timeout
// would pass, even if nothing changes by then.
func (f *follower) await(ctx context.Context, updates <-chan jobwatch.Update) error {
	var stuckDue <-chan time.Time
	if d := f.stuck.Due(); !d.IsZero() {
		stuckDue = time.After(time.Until(d))
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case u := <-updates:
		f.st.Apply(u)
	case <-f.drain.tick:
	case <-stuckDue:
	case <-f.drain.deadline:
		f.drain.active, f.drain.over = false, true
	}
	return nil
}

// step decides, after a burst of updates, whether following is over (done: the caller reads the
// last lines), and otherwise says stuck ranks and starts or stops streams. An error ends
// following; the streams are then stopped, except on a refused --max-log-requests.
func (f *follower) step(streamCtx context.Context) (jobstatus.Result, bool, error) {
	res, done, err := f.jobState()
	if err != nil {
		return res, false, err
	}
	if done && res.Status == jobstatus.Canceled && !f.drain.active && !f.drain.over && !f.drained() {
		f.startDrain()
	}
	switch {
	case done && f.drain.active && !f.drained():
		return res, false, f.reconcile(streamCtx)
	case done:
		return res, true, nil
	}
	if err := f.checkStuck(); err != nil {
		f.stopStreams()
		return res, false, err
	}
	f.sayLost()
	return res, false, f.reconcile(streamCtx)
}

// drainState is set once the Job is canceled while ranks still run (see drained), until they
// are done or the deadline passes (over).
type drainState struct {
	active, over   bool
	deadline, tick <-chan time.Time
	ticker         *time.Ticker
}

// startDrain waits for a canceled job's ranks to stop. A cancel sends SIGTERM: the ranks may
// still print their last lines (a final checkpoint) until they exit. A real kubelet ends each
// stream when its container exits, so the live streams read those lines; wait for that, as
// long as the pods' grace period allows. (A simulated kubelet never ends a stream: its pods
// are deleted instead, which ends the wait too.)
func (f *follower) startDrain() {
	f.drain.active = true
	f.drain.deadline = time.After(f.drainBound())
	f.drain.ticker = time.NewTicker(drainPoll)
	f.drain.tick = f.drain.ticker.C
}

// checkStuck says, once, when ranks of the Job cannot start, and ends following (exit code
// Stuck) once that has lasted cfg.StuckTimeout. Kueue's Workload is not read here: a queued
// job is said to wait in its queue, and followed until it runs.
func (f *follower) checkStuck() error {
	return f.stuck.Check(time.Now(), f.st, f.uid, nil)
}

type follower struct {
	e       *Engine
	cfg     Config
	out     *syncWriter
	uid     types.UID
	seen    bool // the Job was seen once: from then on, its absence means it was deleted
	tailers map[types.UID]*tailer
	wg      sync.WaitGroup
	// reach says, once for all streams and watches, when the server stops answering and when
	// it is back; kubelets says it for each node's kubelet, once for all its pods' streams.
	reach     *outage.Reporter
	noLogSaid atomic.Bool // a rank's "no log yet" was said: the others' are not
	kubeletM  sync.Mutex
	kubelets  map[string]*outage.Reporter
	// watch lists and watches the Job and its pods; st is what they say now.
	watch jobwatch.Job
	st    *jobwatch.State
	// stuck says when ranks cannot start, and ends following when that lasts.
	stuck jobwatch.Stuckness
	drain drainState
	// stopStreams stops every stream and waits for their goroutines.
	stopStreams func()
	// attempts numbers the attempts of the pods followed, for all of the follow.
	attempts attempts
	// size is an elastic job's number of ranks when last seen (0 before, or for a fixed size).
	size int32
	// lost are the pods of an elastic job's ranks already said to be lost (see sayLost).
	lost map[types.UID]bool
}

// writer is where tl's followed lines go: Out, shared by every stream one write at a time, or
// Split's writer for its attempt.
func (f *follower) writer(tl *tailer) io.Writer {
	if f.e.Split != nil {
		return f.e.Split(tl.target)
	}
	return f.out
}

// jobState decides whether following is over. A Job that disappears, or is replaced by a
// same-name Job with another UID, was canceled.
func (f *follower) jobState() (jobstatus.Result, bool, error) {
	job := f.st.Job
	switch {
	case job == nil && !f.seen:
		return jobstatus.Result{Status: jobstatus.Unknown}, false,
			apierrors.NewNotFound(batchv1.Resource("jobs"), f.cfg.Job)
	case job == nil || (f.seen && job.UID != f.uid):
		return jobstatus.Result{Status: jobstatus.Canceled, Message: "the Job was deleted"}, true, nil
	}
	if !f.seen {
		f.uid, f.seen = job.UID, true
	}
	res := jobstatus.Of(job, nil)
	if res.Range != "" {
		// An elastic job's size changes while it is followed (scale): one line per change.
		if f.size != 0 && res.Nodes != f.size && f.e.ErrOut != nil {
			fmt.Fprintf(f.e.ErrOut, "job.batch/%s: from %d to %s (elastic %s)\n", job.Name, f.size, plural.N(res.Nodes, "rank"), res.Range)
		}
		f.size = res.Nodes
	}
	return res, res.Status.Terminal(), nil
}

// sayLost says, once per pod, that a rank of a running elastic job lost its pod: the others go
// on at a smaller world size meanwhile, which is news in a log that otherwise only goes quiet.
func (f *follower) sayLost() {
	if f.size == 0 || f.e.ErrOut == nil {
		return
	}
	for _, p := range lostPods(f.st.Pods, f.uid, f.size, f.lost) {
		if f.lost == nil {
			f.lost = map[types.UID]bool{}
		}
		f.lost[p.UID] = true
		fmt.Fprintf(f.e.ErrOut, "job.batch/%s: rank %d lost its pod %s (%s): the other ranks go on without it until it is placed again\n",
			f.cfg.Job, jobpods.Rank(p), p.Name, lostReason(p))
	}
}

// lostPods are the pods of job uid's ranks, below size and not in said, that stopped running
// before they succeeded. Ranks a shrink removed (index past the size) are not lost, nor are
// any once rank 0 succeeded: an elastic job completes with rank 0, and the Job controller then
// deletes the other ranks' pods, possibly before its status says the job is complete.
func lostPods(pods map[types.UID]*corev1.Pod, uid types.UID, size int32, said map[types.UID]bool) []*corev1.Pod {
	var lost []*corev1.Pod
	for _, p := range pods {
		if !jobpods.Owned(p, uid) {
			continue
		}
		rank := jobpods.Rank(p)
		if rank == 0 && p.Status.Phase == corev1.PodSucceeded {
			return nil
		}
		if said[p.UID] || rank < 0 || int32(rank) >= size || lostReason(p) == "" {
			continue
		}
		lost = append(lost, p)
	}
	sort.Slice(lost, func(i, j int) bool { return jobpods.Rank(lost[i]) < jobpods.Rank(lost[j]) })
	return lost
}

// lostReason is why a rank's pod stopped running: its disruption (eviction, preemption, node
// loss), a deletion, a failure; "" while it runs or after it succeeded.
func lostReason(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason != "" {
			return c.Reason
		}
	}
	switch {
	case p.DeletionTimestamp != nil:
		return "deleted"
	case p.Status.Phase == corev1.PodFailed:
		return "failed"
	}
	return ""
}

// reconcile starts a tailer for each selected pod whose container has started, and stops those
// whose pod is gone. It refuses to open more streams than MaxLogRequests.
func (f *follower) reconcile(ctx context.Context) error {
	live := map[types.UID]bool{}
	var start []Target
	for _, pod := range f.st.Pods {
		if !jobpods.Owned(pod, f.uid) {
			continue
		}
		t := TargetOf(pod, f.cfg.Container, f.cfg.Previous)
		if !wanted(f.cfg.Ranks, t.Rank) {
			continue
		}
		live[t.UID] = true
		if tl, ok := f.tailers[t.UID]; ok {
			tl.terminated.Store(t.Terminated)
			continue
		}
		if t.Started {
			start = append(start, t)
		}
	}
	for uid, tl := range f.tailers {
		if !live[uid] && !tl.gone {
			tl.gone = true
			tl.cancel()
		}
	}
	if len(start) == 0 {
		return nil
	}
	sortTargets(start)
	f.attempts.number(start)
	open := len(start)
	for _, tl := range f.tailers {
		if !tl.gone && !tl.complete.Load() {
			open++
		}
	}
	if max := f.cfg.maxRequests(); open > max {
		return fmt.Errorf("following job.batch/%s needs %d log streams at once, more than --max-log-requests=%d: "+
			"raise --max-log-requests, or follow fewer ranks with --rank", f.cfg.Job, open, max)
	}
	for _, t := range start {
		tctx, cancel := context.WithCancel(ctx)
		tl := &tailer{target: t, cancel: cancel, done: make(chan struct{})}
		tl.terminated.Store(t.Terminated)
		f.tailers[t.UID] = tl
		f.wg.Add(1)
		go f.follow(tctx, tl)
	}
	return nil
}

func (f *follower) wait() { f.wg.Wait() }

// drainPoll is how often a canceled job's streams are checked for their end.
const drainPoll = 100 * time.Millisecond

// drained reports whether no followed stream is still worth waiting for: each one's pod is gone,
// or its stream ended after the container stopped, or nothing is stopping it (the Job is not
// being deleted and the pod is not terminating: an orphaned pod runs on).
func (f *follower) drained() bool {
	jobDeleting := f.st.Job != nil && f.st.Job.DeletionTimestamp != nil
	for uid, tl := range f.tailers {
		if tl.gone || tl.complete.Load() {
			continue
		}
		if p := f.st.Pods[uid]; jobDeleting || (p != nil && p.DeletionTimestamp != nil) {
			return false
		}
	}
	return true
}

// drainBound is how long a canceled job's ranks may take to stop: the longest grace period of
// its pods (30 s unless set), plus a few seconds for the kubelet to report it, at most five
// minutes.
func (f *follower) drainBound() time.Duration {
	grace := int64(30)
	for _, p := range f.st.Pods {
		if g := p.Spec.TerminationGracePeriodSeconds; g != nil && *g > grace {
			grace = *g
		}
		if g := p.DeletionGracePeriodSeconds; g != nil && *g > grace {
			grace = *g
		}
	}
	return min(time.Duration(grace)*time.Second+5*time.Second, 5*time.Minute)
}

// quietOpenFailures is how many times a stream that never delivered a line may fail to open
// before it is mentioned. What it absorbs is KWOK's "no logs found" for a running container that
// has printed nothing (a real kubelet answers an empty log, proven on the real node); on a real
// kubelet a first open fails only when the kubelet cannot be reached, retried the same way.
const quietOpenFailures = 5

// follow keeps one container's stream open until ctx ends: a stream that drops is reopened
// from the cursor, at once and then with backoff while reopening fails. A clean end of stream
// after the container stopped (what a real kubelet does) completes the tailer, and the final read
// skips it; a clean end while the container still runs (the API server's or a proxy's timeout)
// is reopened.
//
// A drop or failed reopen from an unreachable server is logged at -v=2 only and reported once
// for all streams by the follower's outage reporter; another failure is said once until the
// stream works again, except a log not there yet, said only if it lasts.
func (f *follower) follow(ctx context.Context, tl *tailer) {
	defer f.wg.Done()
	defer close(tl.done)
	prefix := prefixFor(f.cfg.Prefix, tl.target)
	failed, said := 0, false
	bo := f.e.backoff()
	for {
		opts := &corev1.PodLogOptions{Container: tl.target.Container, Follow: true, Timestamps: true, Previous: f.cfg.Previous}
		if tl.cursor.Last.IsZero() {
			setLimits(opts, f.cfg)
		} else {
			opts.SinceTime = &metav1.Time{Time: tl.cursor.SinceTime()}
		}
		rc, err := f.e.open(ctx, f.cfg.Namespace, tl.target.Pod, opts)
		opened := err == nil
		if opened {
			f.reach.OK()
			f.kubelet(tl.target.Node).OK()
			before := tl.cursor.Last
			err = streamLines(rc, f.writer(tl), prefix, f.cfg.Timestamps, tl.cursor.Resume())
			rc.Close()
			// A stream that delivered lines is reopened at once when it drops; one that ends
			// empty again and again (a kubelet that ends it) backs off.
			delivered := !tl.cursor.Last.Equal(before)
			if delivered {
				bo = f.e.backoff()
			}
			// The kubelet answers before it opens the log: its error in the body of a stream
			// that delivered nothing is a failure to open, said as such (once, not at each
			// retry).
			var kerr *kubeletError
			if errors.As(err, &kerr) && !delivered {
				opened = false
			} else {
				said = false
			}
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil && tl.terminated.Load() {
			tl.complete.Store(true)
			return
		}
		if err != nil {
			klog.V(outage.DetailLevel).InfoS("log stream failed; reopening", "rank", tl.target.Rank, "pod", tl.target.Pod, "opened", opened, "err", err)
		}
		switch {
		case err == nil || isGone(err) || f.reach.Failed(err) || f.kubelet(tl.target.Node).Failed(err):
		case !opened && tl.cursor.Last.IsZero():
			// A container that has just started may have no log yet: say so only if it lasts.
			// Once for the whole command: at 1,000 ranks starting together a line per rank is a
			// wall (kwok was slow to write 948 of them), and what it says is the same for all.
			if failed++; failed == quietOpenFailures && f.noLogSaid.CompareAndSwap(false, true) {
				fmt.Fprintf(f.e.ErrOut, "rank %d (pod %s): no log yet, retrying: %v (said for the first such rank only)\n", tl.target.Rank, tl.target.Pod, err)
			}
		case !said:
			said = true
			fmt.Fprintf(f.e.ErrOut, "rank %d (pod %s): log stream failed, retrying: %v\n", tl.target.Rank, tl.target.Pod, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(bo.Step()):
		}
	}
}

// kubelet is the outage reporter of node's kubelet.
func (f *follower) kubelet(node string) *outage.Reporter {
	f.kubeletM.Lock()
	defer f.kubeletM.Unlock()
	r, ok := f.kubelets[node]
	if !ok {
		if f.kubelets == nil {
			f.kubelets = map[string]*outage.Reporter{}
		}
		r = outage.NewKubelet(f.e.ErrOut, "following job.batch/"+f.cfg.Job, node, f.e.Clock)
		f.kubelets[node] = r
	}
	return r
}

// lastRead reads every pod of pods once more from where its stream stopped (pods never
// followed, from the start). Pods already gone are skipped quietly.
func (f *follower) lastRead(ctx context.Context, pods []corev1.Pod) error {
	cursors := map[string]*Cursor{}
	var targets []Target
	for _, t := range Targets(jobpods.Keep(pods, f.uid), f.cfg.Ranks, f.cfg.Container, f.cfg.Previous) {
		tl, ok := f.tailers[t.UID]
		switch {
		case ok && tl.complete.Load():
			continue
		case ok:
			cursors[string(t.UID)] = &tl.cursor
		default:
			cursors[string(t.UID)] = &Cursor{}
		}
		targets = append(targets, t)
	}
	// The pods followed keep their numbers; one that started and ended between two looks of
	// the follow gets the next.
	f.attempts.number(targets)
	if err := f.e.readAll(ctx, f.cfg, targets, cursors, false); err != nil {
		fmt.Fprintf(f.e.ErrOut, "warning: %v\n", err)
	}
	return nil
}

func wanted(ranks []int, r int) bool {
	if len(ranks) == 0 {
		return true
	}
	for _, x := range ranks {
		if x == r {
			return true
		}
	}
	return false
}
