// Package tail is the multi-pod log engine behind `kubectl tao logs` and `submit --follow`:
// which pods of a Job, in which order, read once or followed until the Job ends. It takes a
// plain Config and a kubernetes.Interface and knows nothing of cobra; the line formatting, rank
// ordering and resume logic it uses are pure and tested on their own.
package tail

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/outage"
)

// DefaultMaxLogRequests bounds the log streams open at once: it covers a 1,000-rank job, the
// size large training runs reach, so `logs -f` follows one without a flag. A followed stream is
// one HTTP/2 stream to the API server (a long-running request, outside its in-flight limits)
// and a goroutine here; --max-log-requests stays the explicit cap for a smaller budget.
const DefaultMaxLogRequests = 1000

// Config says what to read. It is built by the command line and holds no clients.
type Config struct {
	Namespace string
	Job       string
	// Container to read; empty means each pod's default container (annotation, else the first).
	Container string
	// Ranks to read; empty means all.
	Ranks  []int
	Prefix Prefix
	// Timestamps shows each line's timestamp.
	Timestamps bool
	// TailLines, when set, is the number of most recent lines per pod (-1: all).
	TailLines *int64
	// Since, when positive, keeps only lines newer than this.
	Since    time.Duration
	Previous bool
	// MaxLogRequests bounds concurrent log requests; following more pods than this is refused.
	MaxLogRequests int
	// StuckTimeout ends Follow with exitcode.Stuck once ranks have been unable to start this
	// long; 0 follows forever. The first sign is said on ErrOut either way.
	StuckTimeout time.Duration
}

// OpenFunc opens one container's log. The default uses the client's GetLogs; tests inject
// streams that break on purpose.
type OpenFunc func(ctx context.Context, namespace, pod string, opts *corev1.PodLogOptions) (io.ReadCloser, error)

// Engine reads the logs of a Job's pods and writes them, one whole line per Write, to Out.
// Notices go to ErrOut, never to Out.
type Engine struct {
	Client kubernetes.Interface
	// Open replaces Client's GetLogs when set.
	Open        OpenFunc
	Out, ErrOut io.Writer
	// Retry is the first pause before a dropped stream or watch is reopened (default 250ms);
	// each failed reopen doubles it, with jitter, up to 16 times Retry (see outage.Backoff).
	Retry time.Duration
	// Clock stamps the outage lines; nil is the real clock.
	Clock clock.PassiveClock
	// Gone, when set, is asked for the archived logs of a Job that is gone or whose pods are
	// (Logs only: following needs pods).
	Gone GoneFunc
	// Split, when set, takes the lines instead of Out: each attempt's lines (one pod's, or one
	// archived object's) go to the writer Split returns for its target, whose Rank and Attempt
	// say which attempt of which rank, whole lines per Write, formatted as Config says. The
	// writers are called from many goroutines at once when following. `logs --save` keeps a
	// file per attempt with it (SaveFiles.For).
	Split func(Target) io.Writer
}

// out is where t's lines go when they are not followed: Out, or Split's writer for t.
func (e *Engine) out(t Target) io.Writer {
	if e.Split != nil {
		return e.Split(t)
	}
	return e.Out
}

func (e *Engine) open(ctx context.Context, ns, pod string, opts *corev1.PodLogOptions) (io.ReadCloser, error) {
	if e.Open != nil {
		return e.Open(ctx, ns, pod, opts)
	}
	return e.Client.CoreV1().Pods(ns).GetLogs(pod, opts).Stream(ctx)
}

// backoff returns the pauses of one stream's or watch's retries: each failing stream backs off
// on its own, and the jitter spreads the reopening of many streams dropped at once.
func (e *Engine) backoff() *wait.Backoff {
	first := e.Retry
	if first <= 0 {
		first = defaultRetry
	}
	return outage.Backoff(first, retryCapFactor*first)
}

// defaultRetry and retryCapFactor: a dropped stream is reopened within a quarter second; a
// server that stays away is asked at most every 4 s (6 s with jitter), so a stream resumes
// within seconds of its return without 1,000 streams hammering it meanwhile.
const (
	defaultRetry   = 250 * time.Millisecond
	retryCapFactor = 16
)

func (c Config) maxRequests() int {
	if c.MaxLogRequests > 0 {
		return c.MaxLogRequests
	}
	return DefaultMaxLogRequests
}

// Logs prints the selected pods' logs once, in rank order: fetched concurrently (at most
// MaxLogRequests at a time), each pod printed as soon as it and every pod before it are in.
// The Job and its pods are read in parallel: one get and one (paged) list.
func (e *Engine) Logs(ctx context.Context, cfg Config) error {
	job, pods, err := jobpods.Fetch(ctx, e.Client, cfg.Namespace, cfg.Job)
	switch {
	case job == nil && err != nil:
		if e.Gone != nil && apierrors.IsNotFound(err) {
			if ok, gerr := e.Gone(ctx, nil); ok || gerr != nil {
				return gerr
			}
		}
		return fmt.Errorf("%w in namespace %q", err, cfg.Namespace)
	case err != nil:
		return listErr(cfg, err)
	}
	targets := Targets(pods, cfg.Ranks, cfg.Container, cfg.Previous)
	if len(targets) == 0 && len(pods) == 0 && e.Gone != nil && jobstatus.Of(job, nil).Status.Terminal() {
		if ok, gerr := e.Gone(ctx, job); ok || gerr != nil {
			return gerr
		}
	}
	if len(targets) == 0 {
		fmt.Fprintf(e.ErrOut, "job.batch/%s has no pods%s yet\n", cfg.Job, rankNote(cfg.Ranks))
		return nil
	}
	return e.readAll(ctx, cfg, targets, nil, true)
}

func rankNote(ranks []int) string {
	if len(ranks) == 0 {
		return ""
	}
	return fmt.Sprintf(" of rank %v", ranks)
}

// listPods reads the pods labelled with the Job's name and the list's resourceVersion (the
// point a watch continues from). The caller keeps only those the Job owns.
func (e *Engine) listPods(ctx context.Context, cfg Config) ([]corev1.Pod, string, error) {
	pods, rv, err := jobpods.List(ctx, e.Client, cfg.Namespace, cfg.Job)
	if err != nil {
		return nil, "", listErr(cfg, err)
	}
	return pods, rv, nil
}

func listErr(cfg Config, err error) error {
	return fmt.Errorf("listing the pods of job.batch/%s: %w", cfg.Job, err)
}

// readAll fetches targets concurrently and prints them in order. With cursors (the last read of
// a follow), each pod is read from its cursor and lines already shown are skipped; a target
// whose cursor is nil is read from the start. notes says whether to explain, on ErrOut, pods
// that have no log yet.
func (e *Engine) readAll(ctx context.Context, cfg Config, targets []Target, cursors map[string]*Cursor, notes bool) error {
	type result struct {
		buf  []byte
		err  error
		done chan struct{}
	}
	results := make([]result, len(targets))
	sem := make(chan struct{}, cfg.maxRequests())
	for i, t := range targets {
		results[i].done = make(chan struct{})
		if !t.Started {
			close(results[i].done)
			continue
		}
		go func() {
			defer close(results[i].done)
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				results[i].err = ctx.Err()
				return
			}
			defer func() { <-sem }()
			var cur *Cursor
			if cursors != nil {
				cur = cursors[string(t.UID)]
			}
			results[i].buf, results[i].err = e.readOnce(ctx, cfg, t, cur)
		}()
	}
	var errs []error
	for i, t := range targets {
		<-results[i].done
		r := results[i]
		switch {
		case !t.Started:
			if notes {
				fmt.Fprintf(e.ErrOut, "rank %d (pod %s): no log yet, the container has not started\n", t.Rank, t.Pod)
			}
		default:
			// The lines read before a failure are the pod's: they go out, and the failure is said.
			if len(r.buf) > 0 {
				if _, err := e.out(t).Write(r.buf); err != nil {
					return err
				}
			}
			if r.err != nil {
				errs = append(errs, fmt.Errorf("reading the log of rank %d (pod %s): %w", t.Rank, t.Pod, r.err))
			}
		}
	}
	return errors.Join(errs...)
}

// readOnce reads one container's log without following. With a cursor it resumes after the
// last line shown and advances the cursor. A read that fails returns, with its error, the whole
// lines read before the failure (as a followed stream writes them); the kubelet's error in the
// body of a log asked with timestamps is such a failure (see kubeletError), never a line.
func (e *Engine) readOnce(ctx context.Context, cfg Config, t Target, cur *Cursor) ([]byte, error) {
	opts := &corev1.PodLogOptions{Container: t.Container, Previous: cfg.Previous, Timestamps: cfg.Timestamps || cur != nil}
	if cur != nil && !cur.Last.IsZero() {
		opts.SinceTime = &metav1.Time{Time: cur.SinceTime()}
	} else {
		setLimits(opts, cfg)
	}
	rc, err := e.open(ctx, cfg.Namespace, t.Pod, opts)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	body, err := io.ReadAll(rc)
	if err != nil {
		// A partial last line cut off by the failure is not shown.
		body = body[:bytes.LastIndexByte(body, '\n')+1]
	}
	var replay *Replay
	if cur != nil {
		replay = cur.Resume()
	}
	prefix := prefixFor(cfg.Prefix, t)
	out := make([]byte, 0, len(body)+bytes.Count(body, []byte{'\n'})*len(prefix)+len(prefix)+1)
	for len(body) > 0 {
		line, rest, _ := bytes.Cut(body, []byte{'\n'})
		var ok bool
		if out, ok = appendFiltered(out, prefix, line, opts.Timestamps, cfg.Timestamps, replay); !ok {
			return out, newKubeletError(body)
		}
		body = rest
	}
	return out, err
}

// appendFiltered formats one raw line. stamped says the server put a timestamp in front;
// show says whether the user wants it kept; replay, when set, drops lines already shown. It
// reports false, appending nothing, for a line without the timestamp asked for: that is the
// kubelet's error, not the container's (see kubeletError).
func appendFiltered(dst []byte, prefix string, line []byte, stamped, show bool, replay *Replay) ([]byte, bool) {
	if !stamped {
		return appendLine(dst, prefix, nil, line), true
	}
	stamp, ts, text, ok := splitTimestamp(line)
	if !ok {
		return dst, false
	}
	if replay != nil && !replay.Admit(ts) {
		return dst, true
	}
	if !show {
		stamp = nil
	}
	return appendLine(dst, prefix, stamp, text), true
}

// kubeletError is a log request's failure that the kubelet wrote into the body of its 200
// answer. The kubelet sends its headers before it opens the container's log, so a log it then
// cannot read (removed with the container once the pod is being deleted, say) ends the body
// with the error's text: "failed to try resolving symlinks in path ...". The log is asked
// with timestamps whenever lines must be told apart from that text: the kubelet stamps every
// line of the container's, and never its own error.
type kubeletError struct{ text string }

func (e *kubeletError) Error() string { return e.text }

// newKubeletError is the failure that rest, from the first unstamped line on, reports.
func newKubeletError(rest []byte) error {
	text := strings.TrimSpace(string(rest))
	if len(text) > maxKubeletError {
		text = strings.ToValidUTF8(text[:maxKubeletError], "") + "..."
	}
	if text == "" {
		text = "the log stream has a line without its timestamp"
	}
	return &kubeletError{text: text}
}

// maxKubeletError bounds the text a kubeletError quotes: the kubelet's errors are one line.
const maxKubeletError = 1024

func setLimits(opts *corev1.PodLogOptions, cfg Config) {
	if cfg.TailLines != nil && *cfg.TailLines >= 0 {
		n := *cfg.TailLines
		opts.TailLines = &n
	}
	if cfg.Since > 0 {
		s := int64((cfg.Since + time.Second - 1) / time.Second)
		opts.SinceSeconds = &s
	}
}

// syncWriter serializes whole lines from many streams onto one writer.
type syncWriter struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.err = err
	return n, err
}

// streamLines reads a followed stream line by line and writes the new lines whole, several at
// a time: the lines already received go out in one write (up to streamBatch bytes), and
// nothing is held back once no whole line is waiting, so a backlog costs few writes and a live
// line is shown at once. It returns nil at a clean end of stream and the read error otherwise;
// the whole lines read before an error are written first (the cursor counts them as shown),
// and a partial line cut off by an error is not shown (the next read replays it). A line
// without its timestamp is the kubelet's error, returned as one (see kubeletError).
func streamLines(r io.Reader, w io.Writer, prefix string, show bool, replay *Replay) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var buf []byte
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		_, err := w.Write(buf)
		buf = buf[:0]
		return err
	}
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: gather it whole before writing.
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil && !errors.Is(err, io.EOF) {
			if werr := flush(); werr != nil {
				return werr
			}
			return err
		}
		if len(line) > 0 {
			var ok bool
			if buf, ok = appendFiltered(buf, prefix, bytes.TrimSuffix(line, []byte{'\n'}), true, show, replay); !ok {
				if werr := flush(); werr != nil {
					return werr
				}
				return newKubeletError(line)
			}
		}
		if err != nil {
			return flush()
		}
		if len(buf) >= streamBatch || !wholeLineBuffered(br) {
			if werr := flush(); werr != nil {
				return werr
			}
		}
	}
}

// streamBatch is the most a followed stream gathers before writing.
const streamBatch = 32 << 10

// wholeLineBuffered reports whether br already holds a whole line, so reading it cannot block.
func wholeLineBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	return bytes.IndexByte(b, '\n') >= 0
}

// isGone reports errors that mean the pod or its log no longer exists.
func isGone(err error) bool { return apierrors.IsNotFound(err) }
