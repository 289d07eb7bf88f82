package tail

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"time"

	batchv1 "k8s.io/api/batch/v1"
)

// ArchivedLog is one rank's log as the in-pod wrapper archived it (S3), read back once the
// pods are gone.
type ArchivedLog struct {
	Rank int
	// Pod is the pod of the attempt ("" in an archive of before attempts were kept apart);
	// Attempt counts the rank's attempts from 1, oldest first.
	Pod     string
	Attempt int
	// Written is when the attempt's archive was last written.
	Written time.Time
	// Open opens the attempt's log, read as a stream; the caller closes it.
	Open func() (io.ReadCloser, error)
}

// GoneFunc is called by Logs when the Job is not found (job nil) or has finished with no pod
// left to read: the logs may still be archived. It prints them and returns true, or returns
// false to let Logs report what it found.
type GoneFunc func(ctx context.Context, job *batchv1.Job) (bool, error)

// WriteArchived prints archived logs as Logs prints pods: in the order given (rank order, a
// rank's attempts oldest first, as Logs prints a rank's pods), each line prefixed (PrefixPod
// falls back to the rank for an archive that names no pod), at most tailLines per attempt when
// set, one whole line per Write, to Out or each attempt's to its Split writer. A last line
// without its newline (cut by the archive's last upload) is printed whole. Each log is read
// as a stream: memory holds a line, or the tailLines last ones.
func (e *Engine) WriteArchived(logs []ArchivedLog, p Prefix, tailLines *int64) error {
	last := int64(-1)
	if tailLines != nil {
		last = *tailLines
	}
	for _, l := range logs {
		lp := p
		if lp == PrefixPod && l.Pod == "" {
			lp = PrefixRank
		}
		t := Target{Rank: l.Rank, Pod: l.Pod, Attempt: l.Attempt, Started: true}
		prefix := prefixFor(lp, t)
		w := e.out(t)
		var buf []byte
		err := l.each(last, func(line []byte) error {
			buf = appendLine(buf[:0], prefix, nil, line)
			_, err := w.Write(buf)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// LastLines returns the last n lines of l (all of them when n < 0), without their newlines.
func (l ArchivedLog) LastLines(n int64) ([]string, error) {
	var out []string
	err := l.each(n, func(line []byte) error {
		out = append(out, string(line))
		return nil
	})
	return out, err
}

// each opens l and calls fn with each of its lines without the newline, or only with the last
// n when n >= 0, holding at most those n lines in memory.
func (l ArchivedLog) each(n int64, fn func(line []byte) error) error {
	if n == 0 {
		return nil
	}
	rc, err := l.Open()
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }()
	return eachLine(rc, n, fn)
}

func eachLine(r io.Reader, n int64, fn func(line []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var ring [][]byte
	var next int
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			line = bytes.TrimSuffix(line, []byte("\n"))
			switch {
			case n < 0:
				if ferr := fn(line); ferr != nil {
					return ferr
				}
			case int64(len(ring)) < n:
				ring = append(ring, line)
			default:
				ring[next] = line
				next = (next + 1) % len(ring)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	for i := range ring {
		if err := fn(ring[(next+i)%len(ring)]); err != nil {
			return err
		}
	}
	return nil
}
