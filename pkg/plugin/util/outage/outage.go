// Package outage keeps long-running commands (`logs -f`, `wait`, `submit --wait|--follow`)
// quiet while the API server is away: each failed request is logged at klog -v=2 only, and the
// user reads one line when the server has stopped answering (what waits, since when) and one
// when it answers again, however many streams and watches retry meanwhile. It also gives the
// backoff those retries use: exponential with jitter, capped.
package outage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Quiet is how long failures must last before they are an outage worth a line: a single 503,
// or one stream cut and reopened at once, says nothing.
const Quiet = 2 * time.Second

// DetailLevel is the klog verbosity (-v) at which each failed request and retry is logged.
const DetailLevel = 2

// Reporter tracks whether the API server answers one command. Safe for concurrent use: every
// stream and watch of the command reports to the same one.
type Reporter struct {
	what   string
	server string           // who is unreachable: "the API server", "the kubelet of node N"
	match  func(error) bool // the failures that are this server's outage
	errOut io.Writer
	clock  clock.PassiveClock

	mu    sync.Mutex
	since time.Time // first failure of the current outage; zero while the server answers
	said  bool      // the outage line was printed
}

// New returns a Reporter for a command described by what ("following job.batch/train"),
// writing its two lines to errOut. A nil clk is the real clock.
func New(errOut io.Writer, what string, clk clock.PassiveClock) *Reporter {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Reporter{what: what, server: "the API server", match: Is, errOut: errOut, clock: clk}
}

// NewKubelet returns a Reporter for the kubelet of node, which serves the logs of the pods on
// it through the API server: while it restarts, every stream of a pod on that node fails with
// the API server's 500 naming it (see IsKubelet), and the user reads one line for the node,
// not one per rank.
func NewKubelet(errOut io.Writer, what, node string, clk clock.PassiveClock) *Reporter {
	r := New(errOut, what, clk)
	r.server, r.match = "the kubelet of node "+node, IsKubelet
	return r
}

// Failed records a failed request that the caller will retry. It reports whether err is what
// an unreachable or overloaded server gives (then the caller retries quietly; other errors are
// the caller's to show). The outage line is printed once the failures have lasted Quiet.
func (r *Reporter) Failed(err error) bool {
	if !r.match(err) {
		return false
	}
	klog.V(DetailLevel).InfoS("API request failed; retrying", "what", r.what, "err", err)
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.since.IsZero() {
		r.since = now
	}
	if !r.said && now.Sub(r.since) >= Quiet {
		r.said = true
		fmt.Fprintf(r.errOut, "%s: %s is unreachable since %s (%v); retrying\n", r.what, r.server, r.since.Format("15:04:05"), err)
	}
	return true
}

// OK records a request that succeeded: an outage that was said to have begun is said to be
// over.
func (r *Reporter) OK() {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.since.IsZero() {
		return
	}
	if r.said {
		fmt.Fprintf(r.errOut, "%s: %s answers again (unreachable for %s)\n", r.what, r.server, now.Sub(r.since).Round(time.Second))
	}
	klog.V(DetailLevel).InfoS("API server answers again", "what", r.what, "after", now.Sub(r.since))
	r.since, r.said = time.Time{}, false
}

// Is reports whether err is what a request gets from an API server that is down, restarting,
// overloaded or cut off: a refused, reset or dropped connection, a timeout, or a 429, 503 or
// 504 answer. A NotFound, Forbidden or Invalid is the server's real answer, not an outage, and
// so is a 500: it is about the request (a kubelet that failed to serve a log, say), and the
// caller says it.
func Is(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	// An answer from the server is judged by its code alone: its message may quote a failed
	// connection of the server's own (to a kubelet, see IsKubelet).
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		return apierrors.IsServiceUnavailable(err) || apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || utilnet.IsConnectionRefused(err) ||
		utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	return apierrors.IsServiceUnavailable(err) || apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err)
}

// Wait records err with Failed and, when it is an outage, pauses for bo's next step. It
// reports whether the caller should retry: false for any other error, or when ctx ends first.
// It is the retry step of the commands that repeat one request until it answers (cancel's
// wait, list --watch's new list).
func (r *Reporter) Wait(ctx context.Context, err error, bo *wait.Backoff) bool {
	if !r.Failed(err) {
		return false
	}
	select {
	case <-time.After(bo.Step()):
		return true
	case <-ctx.Done():
		return false
	}
}

// IsKubelet reports whether err is the API server's answer to a log request when the pod's
// kubelet cannot be reached: a 500 whose message is the failed dial or read of the kubelet's
// containerLogs endpoint (refused, reset, timed out, cut).
func IsKubelet(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Code != 500 {
		return false
	}
	msg := st.Status().Message
	if !strings.Contains(msg, "/containerLogs/") {
		return false
	}
	for _, s := range []string{"connection refused", "connection reset", "i/o timeout", "no route to host", "EOF"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// Backoff is the retry pause of streams and watches: from first, doubling, with up to 50 %
// jitter so that many streams dropped at once do not come back at once, capped at limit.
func Backoff(first, limit time.Duration) *wait.Backoff {
	return &wait.Backoff{Duration: first, Factor: 2, Jitter: 0.5, Steps: math.MaxInt32, Cap: limit}
}

// QuietContext returns ctx with a logger that logs everything DetailLevel levels further down:
// errors and unconditional infos at -v=DetailLevel instead of always. client-go logs a watch
// cut mid-body as an error, one line per retry (jobwatch's streams run under it); the
// Reporter says what the user needs instead.
func QuietContext(ctx context.Context) context.Context {
	l := klog.FromContext(ctx)
	return klog.NewContext(ctx, logr.New(demoted{LogSink: l.GetSink()}))
}

// demoted moves every message DetailLevel levels down, and errors to DetailLevel.
type demoted struct{ logr.LogSink }

// Init does not reach the wrapped sink: it was initialised by the logger it came from, and it
// is shared (klog's global one), so logr.New calling Init on it from two goroutines at once
// (two streams starting at once) wrote its call depth while the other's reflector read it
// (found by -race).
func (d demoted) Init(logr.RuntimeInfo) {}

func (d demoted) Enabled(level int) bool { return d.LogSink.Enabled(level + DetailLevel) }
func (d demoted) Info(level int, msg string, kv ...any) {
	d.LogSink.Info(level+DetailLevel, msg, kv...)
}
func (d demoted) Error(err error, msg string, kv ...any) {
	if d.LogSink.Enabled(DetailLevel) {
		d.LogSink.Info(DetailLevel, msg, append(kv, "err", err)...)
	}
}
func (d demoted) WithValues(kv ...any) logr.LogSink { return demoted{d.LogSink.WithValues(kv...)} }
func (d demoted) WithName(name string) logr.LogSink { return demoted{d.LogSink.WithName(name)} }
