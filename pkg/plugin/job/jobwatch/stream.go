// Package jobwatch follows Jobs and their pods over time: it lists them (a page at a time),
// then watches from the list's resourceVersion, resumes a watch that ends from the last version
// seen (bookmarks included), lists again when the server no longer has that version (410
// Gone), and reports an unreachable API server through one outage.Reporter. It is the one place
// the plugin opens watches: `wait`, `submit --wait`, `logs -f`, `submit --follow`, cancel's wait
// for the pods to go and `list --watch` all read their changes from here. Stuck is also decided
// here (stuck.go), from what the watches show.
//
// The engine never prints by itself: it writes only to the writers it is handed.
package jobwatch

import (
	"context"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/outage"
)

// PageSize bounds one page of a list of Jobs (pods are paged by jobpods.PageSize).
const PageSize = 500

// Update is one change from a watch, or (Resync) the whole new state from a list: the first
// list of a stream started without a resourceVersion, or the list made again after the
// watch's version expired.
type Update struct {
	Pod     bool        // of pods (else of Jobs)
	Event   watch.Event // one change
	Resync  bool        // Objects holds every object: it replaces what was known
	Objects []runtime.Object
	// Err ends the stream: a list or watch failed with an error the source's Fatal refuses to
	// retry.
	Err error
	// Listing says that Err is a list's.
	Listing bool
}

// Source lists and watches one kind of object.
type Source struct {
	Pod bool
	// What names it in the line that says a failure other than an outage:
	// "watching <What>: <error> (retrying)".
	What  string
	List  func(ctx context.Context) ([]runtime.Object, string, error)
	Watch func(ctx context.Context, rv string) (watch.Interface, error)
	// Quiet retries failures other than an outage without a line (klog -v=2 only).
	Quiet bool
	// Fatal, when set, picks the failures to open a list (listing) or a watch that end the
	// stream (an Update with Err) instead of being retried. nil retries every one.
	Fatal func(err error, listing bool) bool
}

// Retry says how a stream waits out failures and where it says them.
type Retry struct {
	// Reach says, once for every stream and request of the command, when the API server
	// stops answering and when it is back.
	Reach *outage.Reporter
	// ErrOut gets the one line per failure spell that is not an outage; nil says it at
	// klog -v=2 only.
	ErrOut io.Writer
	// Backoff returns a fresh backoff, used from the first failure of a spell.
	Backoff func() *wait.Backoff
}

// Run lists and watches src until ctx ends, sending each change to out. With rv set, it
// watches from rv (the caller has listed); with rv empty it lists first, and sends that list.
// A watch that closes is reopened from the last version seen, so nothing is missed or
// repeated; a version the server no longer has (410 Gone) means changes may have been missed,
// so the objects are listed again and the whole list is sent. Failures are retried with
// backoff; an unreachable server is r.Reach's to report, any other failure is said once until
// the stream works again.
//
// This is the loop of client-go's RetryWatcher plus the relist on 410 that RetryWatcher leaves
// to its caller (it stops there), with the command's one outage reporter and backoff; an
// informer would keep a second cache of every pod beside the one each command keeps (and its
// reflector's backoff, capped at 30 s, cannot be shortened).
//
// client-go logs a watch cut mid-body as an error: the stream's context moves that to -v=2
// (outage.QuietContext), and r.Reach says what the user needs instead.
func Run(ctx context.Context, rv string, src Source, r Retry, out chan<- Update) {
	s := &stream{src: src, r: r, out: out, bo: r.Backoff()}
	s.run(outage.QuietContext(ctx), rv)
}

type stream struct {
	src     Source
	r       Retry
	out     chan<- Update
	bo      *wait.Backoff
	failing bool // a failure other than an outage was said, and nothing has worked since
}

func (s *stream) run(ctx context.Context, rv string) {
	relist := rv == ""
	for ctx.Err() == nil {
		if relist {
			objs, newRV, err := s.src.List(ctx)
			if err != nil {
				if s.fatal(ctx, err, true) || !s.fail(ctx, err) {
					return
				}
				continue
			}
			s.ok()
			if !s.send(ctx, Update{Pod: s.src.Pod, Resync: true, Objects: objs}) {
				return
			}
			rv, relist = newRV, false
		}
		w, err := s.src.Watch(ctx, rv)
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				relist = true
				continue
			}
			if s.fatal(ctx, err, false) || !s.fail(ctx, err) {
				return
			}
			continue
		}
		var events int
		relist, events = s.drain(ctx, w, &rv)
		w.Stop()
		if events == 0 && !relist && ctx.Err() == nil {
			// Ended before its first event: a cut connection (or a server that ends watches at
			// once) is a failure to wait out, not a reason to reopen in a tight loop.
			if !s.fail(ctx, io.ErrUnexpectedEOF) {
				return
			}
		}
	}
}

// fatal sends err as the stream's end, when the source's Fatal says so.
func (s *stream) fatal(ctx context.Context, err error, listing bool) bool {
	if s.src.Fatal == nil || ctx.Err() != nil || !s.src.Fatal(err, listing) {
		return false
	}
	s.send(ctx, Update{Pod: s.src.Pod, Err: err, Listing: listing})
	return true
}

// ok records a request that worked: the outage (or other failure) is over.
func (s *stream) ok() {
	s.failing = false
	s.r.Reach.OK()
	s.bo = s.r.Backoff()
}

// fail records a failed request and waits for the backoff's next step; false when ctx ended.
func (s *stream) fail(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if !s.r.Reach.Failed(err) && !s.failing {
		s.failing = true
		switch {
		case s.src.Quiet || s.r.ErrOut == nil:
			klog.V(outage.DetailLevel).InfoS("watch failed; retrying", "what", s.src.What, "err", err)
		default:
			fmt.Fprintf(s.r.ErrOut, "watching %s: %v (retrying)\n", s.src.What, err)
		}
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(s.bo.Step()):
		return true
	}
}

func (s *stream) send(ctx context.Context, u Update) bool {
	select {
	case s.out <- u:
		return true
	case <-ctx.Done():
		return false
	}
}

// drain forwards w's events until it closes or ctx ends, advancing *rv. It reports whether
// the objects must be listed again (the watch's version expired), and how many events it got.
// A watch that ends on another error is reopened like one that closes.
func (s *stream) drain(ctx context.Context, w watch.Interface, rv *string) (bool, int) {
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
				expired := apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
				if expired {
					klog.V(outage.DetailLevel).InfoS("watch expired; listing again", "what", s.src.What, "resourceVersion", *rv, "err", err)
				}
				return expired, events
			}
			if events++; events == 1 {
				// The server answers only once an event (a bookmark at least) arrives: client-go
				// turns a connection cut before the answer into an empty watch and no error.
				s.ok()
			}
			if m, err := meta.Accessor(ev.Object); err == nil && m.GetResourceVersion() != "" {
				*rv = m.GetResourceVersion()
			}
			if ev.Type == watch.Bookmark {
				continue
			}
			if !s.send(ctx, Update{Pod: s.src.Pod, Event: ev}) {
				return false, events
			}
		}
	}
}
