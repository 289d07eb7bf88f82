package tail

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

func TestWriteArchived(t *testing.T) {
	logs := []ArchivedLog{{Rank: 0, Open: text("a\n\nb\n")}, {Rank: 2, Open: text("c\nd (cut")}, {Rank: 3, Open: text("")},
		{Rank: 4, Pod: "t-4-aaa", Attempt: 1, Open: text("e\nf\n")}, {Rank: 4, Pod: "t-4-bbb", Attempt: 2, Open: text("g\n")}}
	n := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		prefix Prefix
		tail   *int64
		want   string
	}{
		{PrefixRank, nil, "[rank 0] a\n[rank 0] \n[rank 0] b\n[rank 2] c\n[rank 2] d (cut\n[rank 4] e\n[rank 4] f\n[rank 4] g\n"},
		{PrefixRank, n(-1), "[rank 0] a\n[rank 0] \n[rank 0] b\n[rank 2] c\n[rank 2] d (cut\n[rank 4] e\n[rank 4] f\n[rank 4] g\n"},
		// --tail counts per attempt, as it counts per pod on live pods.
		{PrefixRank, n(2), "[rank 0] \n[rank 0] b\n[rank 2] c\n[rank 2] d (cut\n[rank 4] e\n[rank 4] f\n[rank 4] g\n"},
		{PrefixNone, n(1), "b\nd (cut\nf\ng\n"},
		// Attempts name their pod; an archive of before that falls back to the rank.
		{PrefixPod, n(1), "[rank 0] b\n[rank 2] d (cut\n[pod/t-4-aaa] f\n[pod/t-4-bbb] g\n"},
		{PrefixRank, n(0), ""},
	} {
		var w writeCounter
		if err := (&Engine{Out: &w}).WriteArchived(logs, tc.prefix, tc.tail); err != nil || w.String() != tc.want {
			t.Errorf("%s tail %v: %q, %v; want %q", tc.prefix, tc.tail, w.String(), err, tc.want)
		}
		if lines := bytes.Count(w.Bytes(), []byte("\n")); w.writes != lines {
			t.Errorf("%d writes for %d lines: a line was not written whole", w.writes, lines)
		}
	}
}

// text is the Open of a log holding s.
func text(s string) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(s)), nil }
}

// The last lines of a log longer than the reader's buffer come in order, from any count; an
// error opening or reading the log is returned.
func TestArchivedLastLines(t *testing.T) {
	var b strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	l := ArchivedLog{Open: text(b.String() + "cut")}
	for _, n := range []int64{1, 3, 7, 20001, 30000} {
		got, err := l.LastLines(n)
		want := strings.Split(b.String()+"cut", "\n")
		want = want[max(0, int64(len(want))-n):]
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("last %d: %d lines (%v), want %d", n, len(got), err, len(want))
		}
	}
	if got, err := l.LastLines(-1); err != nil || len(got) != 20001 || got[0] != "line 0" {
		t.Errorf("all: %d lines, %v", len(got), err)
	}
	broken := errors.New("s3://b/k: connection reset")
	failing := ArchivedLog{Open: func() (io.ReadCloser, error) { return nil, broken }}
	if _, err := failing.LastLines(5); !errors.Is(err, broken) {
		t.Errorf("open error: %v", err)
	}
	cut := ArchivedLog{Open: func() (io.ReadCloser, error) {
		return io.NopCloser(io.MultiReader(strings.NewReader("a\nb"), iotest.ErrReader(broken))), nil
	}}
	if err := (&Engine{Out: io.Discard}).WriteArchived([]ArchivedLog{cut}, PrefixNone, nil); !errors.Is(err, broken) {
		t.Errorf("read error: %v", err)
	}
}

type writeCounter struct {
	bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}
