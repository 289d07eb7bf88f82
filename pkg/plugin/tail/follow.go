package tail

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/jobstatus"
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
//
// A canceled ctx (Ctrl-C) stops following and returns ctx's error.
func (e *Engine) Follow(ctx context.Context, cfg Config) (jobstatus.Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	wake := make(chan struct{}, 1)
	notify := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}
	jobs := e.Client.BatchV1().Jobs(cfg.Namespace)
	byName := fields.OneTermEqualSelector("metadata.name", cfg.Job).String()
	jobStore, jobInformer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.FieldSelector = byName
				return jobs.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.FieldSelector = byName
				return jobs.Watch(ctx, o)
			},
		}, e.Client),
		ObjectType: &batchv1.Job{},
		Handler:    handler,
	})
	pods := e.Client.CoreV1().Pods(cfg.Namespace)
	selector := jobNameSelector(cfg.Job)
	podStore, podInformer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector = selector
				return pods.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector = selector
				return pods.Watch(ctx, o)
			},
		}, e.Client),
		ObjectType: &corev1.Pod{},
		Handler:    handler,
	})
	go jobInformer.RunWithContext(ctx)
	go podInformer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), jobInformer.HasSynced, podInformer.HasSynced) {
		return jobstatus.Result{}, ctx.Err()
	}

	f := &follower{e: e, cfg: cfg, out: &syncWriter{w: e.Out}, tailers: map[types.UID]*tailer{}}
	// Streams are canceled apart from the informers: the last read needs them stopped first.
	streamCtx, stopStreams := context.WithCancel(ctx)
	defer stopStreams()
	key := cfg.Namespace + "/" + cfg.Job
	for {
		obj, exists, _ := jobStore.GetByKey(key)
		var job *batchv1.Job
		if exists {
			job = obj.(*batchv1.Job)
		}
		res, done, err := f.jobState(job)
		if err != nil {
			return res, err
		}
		if done {
			stopStreams()
			f.wait()
			return res, f.lastRead(ctx)
		}
		if err := f.reconcile(streamCtx, podStore.List()); err != nil {
			return res, err
		}
		select {
		case <-ctx.Done():
			stopStreams()
			f.wait()
			return jobstatus.Result{}, ctx.Err()
		case <-wake:
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
func (f *follower) reconcile(ctx context.Context, objs []any) error {
	live := map[types.UID]bool{}
	var start []Target
	for _, o := range objs {
		pod, ok := o.(*corev1.Pod)
		if !ok || !ownedBy(pod, f.uid) {
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

// follow keeps one container's stream open until ctx ends: a stream that drops is reopened
// after a pause, from the cursor. A clean end of stream after the container stopped (what a
// real kubelet does) completes the tailer.
func (f *follower) follow(ctx context.Context, tl *tailer) {
	defer f.wg.Done()
	defer close(tl.done)
	prefix := prefixFor(f.cfg.Prefix, tl.target)
	for {
		opts := &corev1.PodLogOptions{Container: tl.target.Container, Follow: true, Timestamps: true, Previous: f.cfg.Previous}
		if tl.cursor.Last.IsZero() {
			setLimits(opts, f.cfg)
		} else {
			opts.SinceTime = &metav1.Time{Time: tl.cursor.SinceTime()}
		}
		rc, err := f.e.open(ctx, f.cfg.Namespace, tl.target.Pod, opts)
		if err == nil {
			err = streamLines(rc, f.out, prefix, f.cfg.Timestamps, tl.cursor.Resume())
			rc.Close()
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil && tl.terminated.Load() {
			tl.complete.Store(true)
			return
		}
		if err != nil && !isGone(err) {
			fmt.Fprintf(f.e.ErrOut, "rank %d (pod %s): log stream dropped, resuming: %v\n", tl.target.Rank, tl.target.Pod, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(f.e.retry()):
		}
	}
}

// lastRead reads every pod once more from where its stream stopped (pods never followed, from
// the start), from a fresh list: the pod watch may lag the Job's. Pods already gone are skipped
// quietly.
func (f *follower) lastRead(ctx context.Context) error {
	pods, err := f.e.listPods(ctx, f.cfg)
	if err != nil {
		return err
	}
	cursors := map[string]*Cursor{}
	var targets []Target
	for _, t := range Targets(Owned(pods, f.uid), f.cfg.Ranks, f.cfg.Container, f.cfg.Previous) {
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
	err = f.e.readAll(ctx, f.cfg, targets, cursors, false)
	if err != nil {
		fmt.Fprintf(f.e.ErrOut, "warning: %v\n", err)
	}
	return nil
}

func ownedBy(pod *corev1.Pod, uid types.UID) bool {
	ref := metav1.GetControllerOf(pod)
	return ref != nil && ref.UID == uid
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
