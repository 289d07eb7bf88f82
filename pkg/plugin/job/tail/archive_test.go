package tail

import (
	"bytes"
	"testing"
)

func TestWriteArchived(t *testing.T) {
	logs := []ArchivedLog{{Rank: 0, Data: []byte("a\n\nb\n")}, {Rank: 2, Data: []byte("c\nd (cut")}, {Rank: 3, Data: nil},
		{Rank: 4, Pod: "t-4-aaa", Attempt: 1, Data: []byte("e\nf\n")}, {Rank: 4, Pod: "t-4-bbb", Attempt: 2, Data: []byte("g\n")}}
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

type writeCounter struct {
	bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}
