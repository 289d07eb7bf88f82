// Package logarchive keeps a copy of a command's combined stdout and stderr while passing both
// through unchanged, and runs that command for the staged container (`kubectl-tao stage run`):
// signals forwarded, its exit code kept, the copy uploaded while it runs and after it ends. The
// upload target is a function, so nothing here knows S3.
package logarchive

import (
	"bytes"
	"io"
	"sync"
)

// maxPartial bounds how much of an unfinished line a stream holds back from the archive: a
// program that never ends its lines (a progress bar redrawn with "\r" only counts as ended, but
// binary output may have neither) must not grow the buffer without limit.
const maxPartial = 64 << 10

// Writer merges the command's streams into one archive, a line at a time: a line reaches the
// archive whole, in the order its end was written, so a stdout line and a stderr line written at
// once never interleave mid-line. A line ends at "\n" or "\r" (progress bars redraw with "\r").
// Errors writing the archive never reach the streams: the command's output must flow even when
// the disk under the archive is full. Err reports the first one.
type Writer struct {
	mu      sync.Mutex
	out     io.Writer
	size    int64
	err     error
	streams []*Stream
}

// NewWriter archives into out.
func NewWriter(out io.Writer) *Writer { return &Writer{out: out} }

// Stream is one of the command's output streams feeding the archive.
type Stream struct {
	w       *Writer
	partial []byte
}

// Stream returns a new stream of w.
func (w *Writer) Stream() *Stream {
	s := &Stream{w: w}
	w.mu.Lock()
	w.streams = append(w.streams, s)
	w.mu.Unlock()
	return s
}

// Write archives the complete lines in p and holds back an unfinished last line until its end
// arrives, Close, or it grows past maxPartial. It always succeeds (see Writer).
func (s *Stream) Write(p []byte) (int, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	s.partial = append(s.partial, p...)
	end := bytes.LastIndexAny(s.partial, "\n\r") + 1
	if len(s.partial)-end > maxPartial {
		end = len(s.partial)
	}
	if end > 0 {
		s.w.write(s.partial[:end])
		s.partial = append(s.partial[:0], s.partial[end:]...)
	}
	return len(p), nil
}

// write appends b to the archive; the caller holds mu.
func (w *Writer) write(b []byte) {
	if w.err != nil || len(b) == 0 {
		return
	}
	n, err := w.out.Write(b)
	w.size += int64(n)
	w.err = err
}

// Close archives every stream's unfinished last line, as it is: the last line of a command that
// ended without a newline is kept. When several streams hold one, each but the last is ended
// with a newline so that they do not run together.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var rest [][]byte
	for _, s := range w.streams {
		if len(s.partial) > 0 {
			rest = append(rest, s.partial)
			s.partial = nil
		}
	}
	for i, b := range rest {
		w.write(b)
		if i < len(rest)-1 {
			w.write([]byte("\n"))
		}
	}
	return w.err
}

// Size is how many bytes the archive holds: its first Size bytes never change again, so an
// upload may read them while the command goes on writing.
func (w *Writer) Size() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.size
}

// Err is the first error writing the archive.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}
