package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
)

// Defaults of a Stager. minio-go already retries each request (10 times, 200 ms to 1 s apart)
// on 5xx, 429, 408 and transport errors; what it cannot retry is a body that breaks or stalls
// after a 200 (a download), so the Stager retries a whole object transfer on top of it.
const (
	DefaultParallel    = 8
	DefaultAttempts    = 3
	DefaultBackoff     = 2 * time.Second
	DefaultIdleTimeout = 2 * time.Minute
)

// Stager moves files between S3 and the local file system. Its zero values take the defaults.
type Stager struct {
	Client *minio.Client
	// Log receives one line per transfer (size and duration) and a summary: stderr.
	Log io.Writer
	// Parallel bounds the concurrent object transfers.
	Parallel int
	// Attempts is how often one object transfer is tried before its error is final.
	Attempts int
	// Backoff is the wait before the second attempt; it doubles after each.
	Backoff time.Duration
	// IdleTimeout aborts (and retries) a download whose body makes no progress this long.
	IdleTimeout time.Duration

	logMu sync.Mutex
}

func (s *Stager) parallel() int {
	if s.Parallel > 0 {
		return s.Parallel
	}
	return DefaultParallel
}

func (s *Stager) attempts() int {
	if s.Attempts > 0 {
		return s.Attempts
	}
	return DefaultAttempts
}

func (s *Stager) backoff() time.Duration {
	if s.Backoff > 0 {
		return s.Backoff
	}
	return DefaultBackoff
}

func (s *Stager) idleTimeout() time.Duration {
	if s.IdleTimeout > 0 {
		return s.IdleTimeout
	}
	return DefaultIdleTimeout
}

// logf writes one whole line, so that parallel transfers never interleave their lines.
func (s *Stager) logf(format string, args ...any) {
	if s.Log == nil {
		return
	}
	line := fmt.Sprintf(format, args...) + "\n"
	s.logMu.Lock()
	defer s.logMu.Unlock()
	_, _ = io.WriteString(s.Log, line)
}

// forEach runs fn for every index in 0..n-1, at most s.parallel() at a time, and returns the
// errors by index (nil where fn succeeded). Every transfer runs, even when some fail, so that
// one run reports every missing object at once.
func (s *Stager) forEach(ctx context.Context, n int, fn func(ctx context.Context, i int) error) []error {
	errs := make([]error, n)
	sem := make(chan struct{}, s.parallel())
	var wg sync.WaitGroup
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			errs[i] = ctx.Err()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = fn(ctx, i)
		}()
	}
	wg.Wait()
	return errs
}

// retry runs fn until it succeeds, fails for good, or s.attempts() are used up.
func (s *Stager) retry(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	wait := s.backoff()
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil || attempt >= s.attempts() || ctx.Err() != nil || !Transient(err) {
			return err
		}
		s.logf("retrying %s in %s (attempt %d of %d failed: %v)", what, wait, attempt, s.attempts(), err)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return err
		}
		wait *= 2
	}
}

// errIdle is the cause of a download aborted for making no progress.
var errIdle = errors.New("no data received within the idle timeout")

// Transient reports whether err may go away on a retry: server errors (5xx), throttling,
// timeouts and broken connections. 4xx answers (missing object, denied, bad credentials) are
// final.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, errIdle) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	if resp := minio.ToErrorResponse(err); resp.StatusCode != 0 {
		return resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) || errors.Is(err, io.EOF)
}

// idleReader cancels its transfer when no Read returns data for timeout, so that a stalled
// connection becomes a retryable error instead of a hang.
type idleReader struct {
	r     io.Reader
	timer *time.Timer
	d     time.Duration
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.timer.Reset(r.d)
	}
	return n, err
}

// humanBytes formats n in binary units, as kubectl prints quantities: 512 B, 1.5 KiB, 12.0 MiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// HumanBytes is humanBytes for other packages' reports.
func HumanBytes(n int64) string { return humanBytes(n) }

// rate describes a transfer of n bytes in d.
func rate(n int64, d time.Duration) string {
	d = d.Round(time.Millisecond)
	if d <= 0 {
		return fmt.Sprintf("%s in %s", humanBytes(n), d)
	}
	return fmt.Sprintf("%s in %s, %s/s", humanBytes(n), d, humanBytes(int64(float64(n)/d.Seconds())))
}
