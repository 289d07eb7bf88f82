package tail

import (
	"bytes"
	"context"
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
	Data    []byte
}

// GoneFunc is called by Logs when the Job is not found (job nil) or has finished with no pod
// left to read: the logs may still be archived. It prints them and returns true, or returns
// false to let Logs report what it found.
type GoneFunc func(ctx context.Context, job *batchv1.Job) (bool, error)

// WriteArchived prints archived logs as Logs prints pods: in the order given (rank order, a
// rank's attempts oldest first, as Logs prints a rank's pods), each line prefixed (PrefixPod
// falls back to the rank for an archive that names no pod), at most tailLines per attempt when
// set, one whole line per Write, to Out or each attempt's to its Split writer. A last line
// without its newline (cut by the archive's last upload) is printed whole.
func (e *Engine) WriteArchived(logs []ArchivedLog, p Prefix, tailLines *int64) error {
	for _, l := range logs {
		lp := p
		if lp == PrefixPod && l.Pod == "" {
			lp = PrefixRank
		}
		t := Target{Rank: l.Rank, Pod: l.Pod, Attempt: l.Attempt, Started: true}
		prefix := prefixFor(lp, t)
		w := e.out(t)
		lines := bytes.SplitAfter(l.Data, []byte("\n"))
		if n := len(lines); n > 0 && len(lines[n-1]) == 0 {
			lines = lines[:n-1]
		}
		if tailLines != nil && *tailLines >= 0 && int64(len(lines)) > *tailLines {
			lines = lines[int64(len(lines))-*tailLines:]
		}
		var buf []byte
		for _, line := range lines {
			buf = appendLine(buf[:0], prefix, nil, bytes.TrimSuffix(line, []byte("\n")))
			if _, err := w.Write(buf); err != nil {
				return err
			}
		}
	}
	return nil
}
