package tail

import (
	"bytes"
	"testing"
)

func TestWriteArchived(t *testing.T) {
	logs := []ArchivedLog{{Rank: 0, Data: []byte("a\n\nb\n")}, {Rank: 2, Data: []byte("c\nd (cut")}, {Rank: 3, Data: nil}}
	n := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		prefix Prefix
		tail   *int64
		want   string
	}{
		{PrefixRank, nil, "[rank 0] a\n[rank 0] \n[rank 0] b\n[rank 2] c\n[rank 2] d (cut\n"},
		{PrefixRank, n(-1), "[rank 0] a\n[rank 0] \n[rank 0] b\n[rank 2] c\n[rank 2] d (cut\n"},
		{PrefixRank, n(2), "[rank 0] \n[rank 0] b\n[rank 2] c\n[rank 2] d (cut\n"},
		{PrefixNone, n(1), "b\nd (cut\n"},
		{PrefixRank, n(0), ""},
	} {
		var w writeCounter
		if err := WriteArchived(&w, logs, tc.prefix, tc.tail); err != nil || w.String() != tc.want {
			t.Errorf("%s tail %v: %q, %v; want %q", tc.prefix, tc.tail, w.String(), err, tc.want)
		}
		if lines := bytes.Count(w.Bytes(), []byte("\n")); w.writes != lines {
			t.Errorf("%d writes for %d lines: a line was not written whole", w.writes, lines)
		}
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
