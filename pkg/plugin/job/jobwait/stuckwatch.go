package jobwait

import (
	"context"
	"io"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/triage"
)

// WorkloadReader reads Kueue's Workload of a job waiting in a queue (kueue.WorkloadOf); nil,
// nil when there is none to read.
type WorkloadReader func(ctx context.Context, job *batchv1.Job) (*jobstatus.Workload, error)

// workloadPoll is how often the Workload of a job waiting in a queue is read again when the
// Job itself does not change: Kueue's verdict lives on the Workload, which is not watched.
const workloadPoll = 30 * time.Second

// stuckWatch runs beside a wait: it watches the Job's pods (the wait watches the Job alone) and
// ends the wait, through stop, when Stuckness says so.
type stuckWatch struct {
	client   kubernetes.Interface
	st       Stuckness
	workload WorkloadReader
	stop     context.CancelCauseFunc

	mu      sync.Mutex
	job     *batchv1.Job
	changed chan struct{}
	done    chan struct{}
}

func newStuckWatch(client kubernetes.Interface, t Target, o Options, progress io.Writer, stop context.CancelCauseFunc) *stuckWatch {
	return &stuckWatch{
		client: client, workload: o.Workload, stop: stop,
		st:      Stuckness{Job: t.Name, Namespace: t.Namespace, Timeout: o.StuckTimeout, Progress: progress},
		changed: make(chan struct{}, 1), done: make(chan struct{}),
	}
}

func (s *stuckWatch) poke() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// setJob records the Job's latest state, from the wait's watch.
func (s *stuckWatch) setJob(job *batchv1.Job) {
	s.mu.Lock()
	s.job = job
	s.mu.Unlock()
	s.poke()
}

// run watches the pods of the Job with uid until ctx ends or it stops the wait. It writes to
// progress only from its own goroutine, and is done (s.done closed) before the wait returns.
func (s *stuckWatch) run(ctx context.Context, ns string, uid types.UID) {
	defer close(s.done)
	pods := s.client.CoreV1().Pods(ns)
	selector := jobpods.UIDSelector(uid)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = selector
			return pods.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			return pods.Watch(ctx, opts)
		},
	}
	poke := func(any) { s.poke() }
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, s.client),
		ObjectType:    &corev1.Pod{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc: poke, UpdateFunc: func(_, o any) { poke(o) }, DeleteFunc: poke,
		},
	})
	go ctrl.RunWithContext(ctx)

	var (
		readJob *batchv1.Job // the state of the Job its status (and Workload) was last read for
		res     jobstatus.Result
		due     *time.Timer
		poll    = time.NewTicker(workloadPoll)
	)
	defer poll.Stop()
	for {
		var dueC <-chan time.Time
		if d := s.st.Due(); !d.IsZero() {
			due = time.NewTimer(time.Until(d))
			dueC = due.C
		}
		polled := false
		select {
		case <-ctx.Done():
			return
		case <-s.changed:
		case <-dueC:
		case <-poll.C:
			polled = true
		}
		if due != nil {
			due.Stop()
		}
		s.mu.Lock()
		job := s.job
		s.mu.Unlock()
		if job == nil {
			continue
		}
		if job != readJob || polled {
			res = jobstatus.WithWorkload(jobstatus.Of(job, nil), job, nil)
			if res.Reason == jobstatus.Queued && s.workload != nil {
				// A Workload that cannot be read leaves the job Queued: the wait goes on.
				if wl, err := s.workload(ctx, job); err == nil {
					res = jobstatus.WithWorkload(jobstatus.Of(job, nil), job, wl)
				}
			}
			readJob = job
		}
		var list []corev1.Pod
		for _, o := range store.List() {
			if p, ok := o.(*corev1.Pod); ok && jobpods.Owned(p, job.UID) {
				list = append(list, *p)
			}
		}
		if err := s.st.Observe(time.Now(), res, triage.StuckOf(job, list, res)); err != nil {
			s.stop(err)
			return
		}
	}
}
