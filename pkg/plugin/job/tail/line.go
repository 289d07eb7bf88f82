package tail

import (
	"bytes"
	"strconv"
	"time"
)

// Prefix says what each printed line starts with.
type Prefix string

// The prefixes of --prefix and --no-prefix.
const (
	PrefixRank Prefix = "rank" // "[rank 3] "
	PrefixPod  Prefix = "pod"  // "[pod/NAME] "
	PrefixNone Prefix = "none" // nothing
)

// prefixFor renders the prefix of t's lines once, so formatting a line is a copy.
func prefixFor(p Prefix, t Target) string {
	switch p {
	case PrefixPod:
		return "[pod/" + t.Pod + "] "
	case PrefixNone:
		return ""
	}
	return "[rank " + strconv.Itoa(t.Rank) + "] "
}

// splitTimestamp cuts the RFC3339Nano timestamp the API server puts before each line when
// timestamps=true. ok is false for a line without one: not the container's, whose every line
// is stamped, but the kubelet's error (see kubeletError).
func splitTimestamp(line []byte) (stamp []byte, ts time.Time, rest []byte, ok bool) {
	i := bytes.IndexByte(line, ' ')
	if i <= 0 {
		return nil, time.Time{}, line, false
	}
	ts, err := time.Parse(time.RFC3339Nano, string(line[:i]))
	if err != nil {
		return nil, time.Time{}, line, false
	}
	return line[:i], ts, line[i+1:], true
}

// appendLine appends one output line: prefix, the timestamp when shown, the text and a newline.
// The caller writes the result with a single Write, so concurrent pods never interleave
// mid-line.
func appendLine(dst []byte, prefix string, stamp, text []byte) []byte {
	dst = append(dst, prefix...)
	if len(stamp) > 0 {
		dst = append(dst, stamp...)
		dst = append(dst, ' ')
	}
	dst = append(dst, text...)
	return append(dst, '\n')
}

// Cursor remembers the last line shown from one container, so that a stream opened again
// neither repeats nor loses lines.
//
// The API's sinceTime has one-second precision, so a resumed stream replays the whole second of
// the last line shown. Lines are skipped up to that line: all lines stamped before it, and as
// many lines stamped exactly like it as were already shown (one timestamp can carry many lines
// when a program writes a burst at once).
type Cursor struct {
	Last time.Time // timestamp of the last line shown; zero before the first
	Same int       // lines shown so far stamped exactly Last
}

// SinceTime is where to reopen the stream: the start of the last shown line's second.
func (c Cursor) SinceTime() time.Time { return c.Last.Truncate(time.Second) }

// Resume returns the filter for a stream reopened at SinceTime.
func (c *Cursor) Resume() *Replay {
	return &Replay{c: c, skipSame: c.Same, replaying: !c.Last.IsZero()}
}

// Replay filters one stream's lines against a Cursor and advances it.
type Replay struct {
	c         *Cursor
	skipSame  int
	seenSame  int
	replaying bool
}

// Admit reports whether a line stamped ts is new, and if so records it as shown. Once one new
// line has passed, everything after it is new: the filter never drops a line for an
// out-of-order timestamp later in the stream.
func (r *Replay) Admit(ts time.Time) bool {
	if r.replaying {
		if ts.Before(r.c.Last) {
			return false
		}
		if ts.Equal(r.c.Last) && r.seenSame < r.skipSame {
			r.seenSame++
			return false
		}
		r.replaying = false
	}
	if ts.Equal(r.c.Last) {
		r.c.Same++
	} else {
		r.c.Last, r.c.Same = ts, 1
	}
	return true
}

// SinceTimeOrZero is SinceTime, or zero before the first line (read from the start).
func (c Cursor) SinceTimeOrZero() time.Time {
	if c.Last.IsZero() {
		return time.Time{}
	}
	return c.SinceTime()
}
