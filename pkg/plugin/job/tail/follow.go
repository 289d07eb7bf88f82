package tail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobwait"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/triage"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/outage"
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

	// One Job list and one pod list, in parallel: the streams start from them at once, not
	// after a watch has synced. Watches then continue from each list's resourceVersion, so no
	// change in between is missed.
	var (
		jobs      []batchv1.Job
		jobRV     string
		jobErr    error
		wg        sync.WaitGroup
		jobByName = fields.OneTermEqualSelector("metadata.name", cfg.Job).String()
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		jobs, jobRV, jobErr = e.listJob(ctx, cfg, jobByName)
	}()
	pods, podRV, err := e.listPods(ctx, cfg)
	wg.Wait()
	if jobErr != nil {
		return jobstatus.Result{}, jobErr
	}
	if err != nil {
		return jobstatus.Result{}, err
	}

	f := &follower{e: e, cfg: cfg, out: &syncWriter{w: e.Out}, tailers: map[types.UID]*tailer{}, pods: map[types.UID]*corev1.Pod{},
		reach: outage.New(e.ErrOut, "following job.batch/"+cfg.Job, e.Clock),
		stuck: jobwait.Stuckness{Job: cfg.Job, Namespace: cfg.Namespace, Timeout: cfg.StuckTimeout, Progress: e.ErrOut}}
	f.setJobs(jobs)
	f.setPods(pods)
	res, done, err := f.jobState(f.job)
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
	if err := f.reconcile(streamCtx); err != nil {
		return res, err
	}

	updates := make(chan update, 64)
	jobsClient := e.Client.BatchV1().Jobs(cfg.Namespace)
	go e.watchFrom(ctx, jobRV, updates, source{
		what:  "job.batch/" + cfg.Job,
		reach: f.reach,
		list: func(ctx context.Context) ([]runtime.Object, string, error) {
			jobs, rv, err := e.listJob(ctx, cfg, jobByName)
			objs := make([]runtime.Object, len(jobs))
			for i := range jobs {
				objs[i] = &jobs[i]
			}
			return objs, rv, err
		},
		watch: func(ctx context.Context, rv string) (watch.Interface, error) {
			return jobsClient.Watch(ctx, metav1.ListOptions{FieldSelector: jobByName, ResourceVersion: rv, AllowWatchBookmarks: true})
		},
	})
	podsClient := e.Client.CoreV1().Pods(cfg.Namespace)
	selector := jobpods.Selector(cfg.Job)
	go e.watchFrom(ctx, podRV, updates, source{
		isPod: true,
		reach: f.reach,
		what:  "the pods of job.batch/" + cfg.Job,
		list: func(ctx context.Context) ([]runtime.Object, string, error) {
			pods, rv, err := e.listPods(ctx, cfg)
			objs := make([]runtime.Object, len(pods))
			for i := range pods {
				objs[i] = &pods[i]
			}
			return objs, rv, err
		},
		watch: func(ctx context.Context, rv string) (watch.Interface, error) {
			return podsClient.Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv, AllowWatchBookmarks: true})
		},
	})

	// draining is set once the Job is canceled while ranks still run (see drained), until they
	// are done or the deadline passes (drainOver).
	var (
		draining, drainOver bool
		deadline, tick      <-chan time.Time
	)
	if err := f.checkStuck(); err != nil {
		stopStreams()
		f.wait()
		return res, err
	}
	for {
		// A job whose ranks cannot start is looked at again when --stuck-timeout would pass,
		// even if nothing changes by then.
		var stuckDue <-chan time.Time
		if d := f.stuck.Due(); !d.IsZero() {
			stuckDue = time.After(time.Until(d))
		}
		select {
		case <-ctx.Done():
			stopStreams()
			f.wait()
			return jobstatus.Result{}, ctx.Err()
		case u := <-updates:
			f.apply(u)
		case <-tick:
		case <-stuckDue:
		case <-deadline:
			draining, drainOver = false, true
		}
		// Apply whatever else is queued before deciding: one decision per burst of events.
		for drained := false; !drained; {
			select {
			case u := <-updates:
				f.apply(u)
			default:
				drained = true
			}
		}
		res, done, err := f.jobState(f.job)
		if err != nil {
			return res, err
		}
		if done && res.Status == jobstatus.Canceled && !draining && !drainOver && !f.drained() {
			// A cancel sends SIGTERM: the ranks may still print their last lines (a final
			// checkpoint) until they exit. A real kubelet ends each stream when its container
			// exits, so the live streams read those lines; wait for that, as long as the pods'
			// grace period allows. (A simulated kubelet never ends a stream: its pods are
			// deleted instead, which ends the wait too.)
			draining = true
			deadline = time.After(f.drainBound())
			ticker := time.NewTicker(drainPoll)
			defer ticker.Stop()
			tick = ticker.C
		}
		if done && draining && !f.drained() {
			if err := f.reconcile(streamCtx); err != nil {
				return res, err
			}
			continue
		}
		if done {
			stopStreams()
			f.wait()
			// A fresh list: the pod watch may lag the Job's.
			pods, _, err := e.listPods(ctx, cfg)
			if err != nil {
				return res, err
			}
			return res, f.lastRead(ctx, pods)
		}
		if err := f.checkStuck(); err != nil {
			stopStreams()
			f.wait()
			return res, err
		}
		if err := f.reconcile(streamCtx); err != nil {
			return res, err
		}
	}
}

// checkStuck says, once, when ranks of the Job cannot start, and ends following (exit code
// Stuck) once that has lasted cfg.StuckTimeout. Kueue's Workload is not read here: a queued
// job is said to wait in its queue, and followed until it runs.
func (f *follower) checkStuck() error {
	if f.job == nil {
		return nil
	}
	var pods []corev1.Pod
	for _, p := range f.pods {
		if jobpods.Owned(p, f.uid) {
			pods = append(pods, *p)
		}
	}
	r := jobstatus.WithWorkload(jobstatus.Of(f.job, nil), f.job, nil)
	return f.stuck.Observe(time.Now(), r, triage.StuckOf(f.job, pods, r))
}

// listJob lists the Job by name: one request, and a resourceVersion to watch it from.
func (e *Engine) listJob(ctx context.Context, cfg Config, byName string) ([]batchv1.Job, string, error) {
	l, err := e.Client.BatchV1().Jobs(cfg.Namespace).List(ctx, metav1.ListOptions{FieldSelector: byName})
	if err != nil {
		return nil, "", fmt.Errorf("reading job.batch/%s: %w", cfg.Job, err)
	}
	return l.Items, l.ResourceVersion, nil
}

// update is one change from a watch, or (relist) the whole new state after the watch's
// resourceVersion expired.
type update struct {
	isPod  bool
	ev     watch.Event
	resync bool // relist holds every object: it replaces what was known
	relist []runtime.Object
}

// source lists and watches one kind of object.
type source struct {
	isPod bool
	what  string
	reach *outage.Reporter
	list  func(ctx context.Context) ([]runtime.Object, string, error)
	watch func(ctx context.Context, rv string) (watch.Interface, error)
}

// watchFrom watches from resourceVersion rv until ctx ends, sending each change to out. A
// watch that closes is reopened from the last version seen (bookmarks included), so nothing is
// missed or repeated; a version the server no longer has (410 Gone) means changes may have
// been missed, so the objects are listed again and the whole list is sent. Failures are
// retried with backoff; an unreachable server is src.reach's to report, any other failure is
// said once on ErrOut until the watch works again.
//
// This is the loop of client-go's RetryWatcher plus the relist on 410 that RetryWatcher leaves
// to its caller (it stops there), and it shares the follower's outage reporting and backoff;
// an informer would keep a cache of every pod the follower already keeps itself.
func (e *Engine) watchFrom(ctx context.Context, rv string, out chan<- update, src source) {
	isPod := src.isPod
	failing := false
	bo := e.backoff()
	fail := func(err error) bool {
		if ctx.Err() != nil {
			return false
		}
		if !src.reach.Failed(err) && !failing {
			fmt.Fprintf(e.ErrOut, "watching %s: %v (retrying)\n", src.what, err)
			failing = true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(bo.Step()):
			return true
		}
	}
	send := func(u update) bool {
		select {
		case out <- u:
			return true
		case <-ctx.Done():
			return false
		}
	}
	relist := false
	for ctx.Err() == nil {
		if relist {
			objs, newRV, err := src.list(ctx)
			if err != nil {
				if !fail(err) {
					return
				}
				continue
			}
			if !send(update{isPod: isPod, resync: true, relist: objs}) {
				return
			}
			rv, relist = newRV, false
		}
		w, err := src.watch(ctx, rv)
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				relist = true
				continue
			}
			if !fail(err) {
				return
			}
			continue
		}
		var events int
		relist, events = e.drainWatch(ctx, w, &rv, isPod, send, func() {
			// The server answers only once an event (a bookmark at least) arrives: client-go
			// turns a connection cut before the answer into an empty watch and no error.
			failing = false
			src.reach.OK()
			bo = e.backoff()
		})
		w.Stop()
		if events == 0 && !relist && ctx.Err() == nil {
			// Ended before its first event: a cut connection (or a server that ends watches at
			// once) is a failure to wait out, not a reason to reopen in a tight loop.
			if !fail(io.ErrUnexpectedEOF) {
				return
			}
		}
	}
}

// drainWatch forwards w's events until it closes or ctx ends, advancing *rv. It reports
// whether the objects must be listed again (the watch's version expired), and how many events
// it got; first runs at the first.
func (e *Engine) drainWatch(ctx context.Context, w watch.Interface, rv *string, isPod bool, send func(update) bool, first func()) (bool, int) {
	events := 0
	for {
		select {
		case <-ctx.Done():
			return false, events
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false, events
			}
			if ev.Type == watch.Error {
				err := apierrors.FromObject(ev.Object)
				return apierrors.IsResourceExpired(err) || apierrors.IsGone(err), events
			}
			if events++; events == 1 {
				first()
			}
			switch ev.Type {
			case watch.Bookmark:
				if m, err := meta.Accessor(ev.Object); err == nil && m.GetResourceVersion() != "" {
					*rv = m.GetResourceVersion()
				}
				continue
			}
			if m, err := meta.Accessor(ev.Object); err == nil && m.GetResourceVersion() != "" {
				*rv = m.GetResourceVersion()
			}
			if !send(update{ev: ev, isPod: isPod}) {
				return false, events
			}
		}
	}
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
	// What the lists and watches say now: the Job (nil when absent) and its selected pods.
	job  *batchv1.Job
	pods map[types.UID]*corev1.Pod
	// stuck says when ranks cannot start, and ends following when that lasts.
	stuck jobwait.Stuckness
	// attempts numbers the attempts of the pods followed, for all of the follow.
	attempts attempts
}

// writer is where tl's followed lines go: Out, shared by every stream one write at a time, or
// Split's writer for its attempt.
func (f *follower) writer(tl *tailer) io.Writer {
	if f.e.Split != nil {
		return f.e.Split(tl.target)
	}
	return f.out
}

func (f *follower) setJobs(jobs []batchv1.Job) {
	f.job = nil
	for i := range jobs {
		if jobs[i].Name == f.cfg.Job {
			f.job = &jobs[i]
		}
	}
}

func (f *follower) setPods(pods []corev1.Pod) {
	clear(f.pods)
	for i := range pods {
		f.pods[pods[i].UID] = &pods[i]
	}
}

// apply records one update in the follower's view of the Job and its pods.
func (f *follower) apply(u update) {
	if u.resync {
		if u.isPod {
			clear(f.pods)
			for _, o := range u.relist {
				if p, ok := o.(*corev1.Pod); ok {
					f.pods[p.UID] = p
				}
			}
			return
		}
		f.job = nil
		for _, o := range u.relist {
			if j, ok := o.(*batchv1.Job); ok && j.Name == f.cfg.Job {
				f.job = j
			}
		}
		return
	}
	if u.isPod {
		p, ok := u.ev.Object.(*corev1.Pod)
		if !ok {
			return
		}
		if u.ev.Type == watch.Deleted {
			delete(f.pods, p.UID)
		} else {
			f.pods[p.UID] = p
		}
		return
	}
	j, ok := u.ev.Object.(*batchv1.Job)
	if !ok || j.Name != f.cfg.Job {
		return
	}
	if u.ev.Type == watch.Deleted {
		if f.job != nil && f.job.UID == j.UID {
			f.job = nil
		}
		return
	}
	f.job = j
}

// jobState decides whether following is over. A Job that disappears, or is replaced by a
// same-name Job with another UID, was canceled.
func (f *follower) jobState(job *batchv1.Job) (jobstatus.Result, bool, error) {
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
	return res, res.Status.Terminal(), nil
}

// reconcile starts a tailer for each selected pod whose container has started, and stops those
// whose pod is gone. It refuses to open more streams than MaxLogRequests.
func (f *follower) reconcile(ctx context.Context) error {
	live := map[types.UID]bool{}
	var start []Target
	for _, pod := range f.pods {
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
	jobDeleting := f.job != nil && f.job.DeletionTimestamp != nil
	for uid, tl := range f.tailers {
		if tl.gone || tl.complete.Load() {
			continue
		}
		if p := f.pods[uid]; jobDeleting || (p != nil && p.DeletionTimestamp != nil) {
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
	for _, p := range f.pods {
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
