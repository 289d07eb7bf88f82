package tail

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

func TestPrefixAndLine(t *testing.T) {
	tg := Target{Pod: "train-2-x7k2p", Rank: 2}
	tests := []struct {
		prefix Prefix
		stamp  string
		want   string
	}{
		{PrefixRank, "", "[rank 2] rank 2 step 1\n"},
		{PrefixPod, "", "[pod/train-2-x7k2p] rank 2 step 1\n"},
		{PrefixNone, "", "rank 2 step 1\n"},
		{PrefixRank, "2026-11-29T18:55:02.576411471Z", "[rank 2] 2026-11-29T18:55:02.576411471Z rank 2 step 1\n"},
	}
	for _, tc := range tests {
		got := string(appendLine(nil, prefixFor(tc.prefix, tg), []byte(tc.stamp), []byte("rank 2 step 1")))
		if got != tc.want {
			t.Errorf("%s %q: got %q, want %q", tc.prefix, tc.stamp, got, tc.want)
		}
	}
}

func TestSplitTimestamp(t *testing.T) {
	tests := []struct {
		line   string
		ok     bool
		stamp  string
		rest   string
		second int
	}{
		{"2026-11-29T18:55:02.576411471Z rank 0 step 1", true, "2026-11-29T18:55:02.576411471Z", "rank 0 step 1", 2},
		{"2026-11-29T18:55:03Z  two spaces", true, "2026-11-29T18:55:03Z", " two spaces", 3},
		{"2026-11-29T18:55:03Z ", true, "2026-11-29T18:55:03Z", "", 3},
		{"no timestamp here", false, "", "no timestamp here", 0},
		{"", false, "", "", 0},
	}
	for _, tc := range tests {
		stamp, ts, rest, ok := splitTimestamp([]byte(tc.line))
		if ok != tc.ok || string(stamp) != tc.stamp || string(rest) != tc.rest || (ok && ts.Second() != tc.second) {
			t.Errorf("%q: got %q %v %q %v", tc.line, stamp, ts, rest, ok)
		}
	}
}

// logLine is one line of a simulated container log.
type logLine struct {
	ts   time.Time
	text string
}

// serve returns what the API server sends for a log read from sinceTime (zero: from the
// start): every line stamped at or after it, each with its RFC3339Nano timestamp.
func serve(log []logLine, since time.Time) string {
	var b strings.Builder
	for _, l := range log {
		if !since.IsZero() && l.ts.Before(since) {
			continue
		}
		fmt.Fprintf(&b, "%s %s\n", l.ts.UTC().Format(time.RFC3339Nano), l.text)
	}
	return b.String()
}

// breakAfter yields the first n lines of s, then fails as a dropped connection does (a line may
// be cut in half).
type breakAfter struct {
	r   io.Reader
	cut bool
}

func newBreakAfter(s string, n int, cutMidLine bool) *breakAfter {
	lines := strings.SplitAfter(s, "\n")
	if n < len(lines) {
		keep := strings.Join(lines[:n], "")
		if cutMidLine && len(lines[n]) > 3 {
			keep += lines[n][:len(lines[n])/2]
		}
		return &breakAfter{r: strings.NewReader(keep), cut: true}
	}
	return &breakAfter{r: strings.NewReader(s)}
}

func (b *breakAfter) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if errors.Is(err, io.EOF) && b.cut {
		return n, errors.New("connection reset by peer")
	}
	return n, err
}

func makeLog(stamps ...string) []logLine {
	var out []logLine
	for i, s := range stamps {
		ts, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			panic(err)
		}
		out = append(out, logLine{ts, fmt.Sprintf("line %d", i+1)})
	}
	return out
}

func repeatStamp(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestResumeNoLossNoDuplicate breaks a followed stream after every possible number of lines, and
// again after each reconnect, and checks that what is printed is the log exactly once.
func TestResumeNoLossNoDuplicate(t *testing.T) {
	logs := map[string][]logLine{
		"distinct seconds": makeLog("2026-11-29T18:55:01.1Z", "2026-11-29T18:55:02.2Z", "2026-11-29T18:55:03.3Z", "2026-11-29T18:55:04.4Z"),
		"one second, distinct nanos": makeLog("2026-11-29T18:55:02.000000001Z", "2026-11-29T18:55:02.1Z", "2026-11-29T18:55:02.5Z",
			"2026-11-29T18:55:02.999999999Z", "2026-11-29T18:55:03Z"),
		"a burst under one timestamp": makeLog(repeatStamp("2026-11-29T18:55:02.576411471Z", 6)...),
		"bursts and steps": makeLog("2026-11-29T18:55:01.5Z", "2026-11-29T18:55:02.5Z", "2026-11-29T18:55:02.5Z", "2026-11-29T18:55:02.7Z",
			"2026-11-29T18:55:02.7Z", "2026-11-29T18:55:02.7Z", "2026-11-29T18:55:05Z"),
	}
	for name, log := range logs {
		for breakAt := 0; breakAt <= len(log); breakAt++ {
			for _, cut := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/break after %d/cut %v", name, breakAt, cut), func(t *testing.T) {
					var want bytes.Buffer
					for _, l := range log {
						fmt.Fprintf(&want, "[rank 1] %s\n", l.text)
					}
					var got bytes.Buffer
					var cur Cursor
					// Each reconnect breaks again, one line later than the one before, so that
					// breaks also fall inside the replayed second.
					for attempt := 0; attempt < 4*len(log)+2; attempt++ {
						n := breakAt + attempt
						body := serve(log, cur.SinceTimeOrZero())
						r := newBreakAfter(body, n, cut)
						if err := streamLines(r, &got, "[rank 1] ", false, cur.Resume()); err == nil {
							break
						}
					}
					if got.String() != want.String() {
						t.Fatalf("got\n%s\nwant\n%s", got.String(), want.String())
					}
				})
			}
		}
	}
}

func TestReplayKeepsOutOfOrderLinesOnceNew(t *testing.T) {
	log := makeLog("2026-11-29T18:55:02Z", "2026-11-29T18:55:03Z", "2026-11-29T18:55:01Z")
	var got bytes.Buffer
	var cur Cursor
	if err := streamLines(strings.NewReader(serve(log, time.Time{})), &got, "", false, cur.Resume()); err != nil {
		t.Fatal(err)
	}
	if got.String() != "line 1\nline 2\nline 3\n" {
		t.Fatalf("a first read must drop nothing, got %q", got.String())
	}
}

func TestStreamLinesTimestampsAndLongLines(t *testing.T) {
	long := strings.Repeat("x", 200<<10)
	in := "2026-11-29T18:55:02.5Z " + long + "\n2026-11-29T18:55:03Z last without newline"
	var got bytes.Buffer
	var cur Cursor
	if err := streamLines(strings.NewReader(in), &got, "[rank 0] ", true, cur.Resume()); err != nil {
		t.Fatal(err)
	}
	want := "[rank 0] 2026-11-29T18:55:02.5Z " + long + "\n[rank 0] 2026-11-29T18:55:03Z last without newline\n"
	if got.String() != want {
		t.Fatalf("got %d bytes, want %d; tail %q", got.Len(), len(want), got.String()[max(0, got.Len()-80):])
	}
}

func TestTargetsRankOrder(t *testing.T) {
	labelled := fixture.RankPod(train().Obj(), -1).Name("train-1-b").Created(time.Unix(5, 0)).Running(time.Time{}).Val()
	labelled.Labels["batch.kubernetes.io/job-completion-index"] = "1"
	pods := []corev1.Pod{
		// As Kubernetes before 1.28 made it: the index annotation, no label.
		fixture.RankPod(train().Obj(), -1).Annotation(batchv1.JobCompletionIndexAnnotation, "10").Name("train-10-a").Created(time.Unix(1, 0)).Running(time.Time{}).Val(),
		fixture.RankPod(train().Obj(), 2).Name("train-2-a").Created(time.Unix(1, 0)).Waiting("ContainerCreating", "").Val(),
		fixture.RankPod(train().Obj(), 0).Name("train-0-b").Created(time.Unix(9, 0)).Running(time.Time{}).Val(), // replaced rank 0: after the older pod
		fixture.RankPod(train().Obj(), 0).Name("train-0-a").Created(time.Unix(2, 0)).Succeeded(time.Time{}).Val(),
		labelled,
	}
	tests := []struct {
		ranks []int
		want  string
	}{
		{nil, "0:train-0-a:started 0:train-0-b:started 1:train-1-b:started 2:train-2-a:pending 10:train-10-a:started"},
		{[]int{10, 0}, "0:train-0-a:started 0:train-0-b:started 10:train-10-a:started"},
		{[]int{7}, ""},
	}
	for _, tc := range tests {
		var got []string
		for _, tg := range Targets(pods, tc.ranks, "", false) {
			state := "pending"
			if tg.Started {
				state = "started"
			}
			got = append(got, fmt.Sprintf("%d:%s:%s", tg.Rank, tg.Pod, state))
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("ranks %v: got %q, want %q", tc.ranks, strings.Join(got, " "), tc.want)
		}
	}
}

func TestTargetOfContainerAndPrevious(t *testing.T) {
	p := fixture.RankPod(train().Obj(), -1).Name("p").Created(time.Unix(1, 0)).Running(time.Time{}).Val()
	p.Spec.Containers = append([]corev1.Container{{Name: "sidecar"}}, p.Spec.Containers...)
	if got := TargetOf(&p, "", false).Container; got != "sidecar" {
		t.Errorf("first container: got %q", got)
	}
	p.Annotations[defaultContainerAnnotation] = "main"
	if tg := TargetOf(&p, "", false); tg.Container != "main" || !tg.Started || tg.Terminated || tg.Rank != 0 {
		t.Errorf("default-container annotation: got %+v", tg)
	}
	if tg := TargetOf(&p, "sidecar", false); tg.Started {
		t.Errorf("a container without status has not started: %+v", tg)
	}
	if tg := TargetOf(&p, "", true); tg.Started {
		t.Errorf("--previous without an earlier instance: %+v", tg)
	}
	p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{}
	if tg := TargetOf(&p, "", true); !tg.Started || !tg.Terminated {
		t.Errorf("--previous with an earlier instance: %+v", tg)
	}
}

// BenchmarkFormat formats a 2,000-line pod log with timestamps stripped, as `logs` does for
// each rank.
func BenchmarkFormat(b *testing.B) {
	var log []logLine
	for k := 1; k <= 2000; k++ {
		log = append(log, logLine{time.Date(2026, 11, 29, 18, 55, 2, k, time.UTC), fmt.Sprintf("rank 7 step %d", k)})
	}
	body := []byte(serve(log, time.Time{}))
	b.SetBytes(int64(len(body)))
	var dst []byte
	for b.Loop() {
		dst = dst[:0]
		rest := body
		for len(rest) > 0 {
			i := bytes.IndexByte(rest, '\n')
			dst, _ = appendFiltered(dst, "[rank 7] ", rest[:i], true, false, nil)
			rest = rest[i+1:]
		}
	}
}

// writes records each Write.
type writes struct {
	mu sync.Mutex
	w  []string
}

func (r *writes) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.w = append(r.w, string(p))
	return len(p), nil
}

func (r *writes) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.w...)
}

// TestStreamLinesBatchesABacklog: lines already received go out a batch per write (a
// 2,000-line backlog is not 2,000 writes), and every write holds whole lines only.
func TestStreamLinesBatchesABacklog(t *testing.T) {
	var in strings.Builder
	for i := 0; i < 2000; i++ {
		fmt.Fprintf(&in, "2026-11-29T18:55:02.%09dZ step %d of the training loop\n", i, i)
	}
	var got writes
	var cur Cursor
	if err := streamLines(strings.NewReader(in.String()), &got, "[rank 3] ", false, cur.Resume()); err != nil {
		t.Fatal(err)
	}
	ws := got.all()
	if len(ws) > 10 {
		t.Errorf("%d writes for 2,000 buffered lines", len(ws))
	}
	n := 0
	for _, w := range ws {
		if !strings.HasPrefix(w, "[rank 3] step ") || !strings.HasSuffix(w, "\n") {
			t.Fatalf("a write that is not whole lines: %.40q...%q", w, w[max(0, len(w)-20):])
		}
		n += strings.Count(w, "\n")
	}
	if n != 2000 {
		t.Errorf("%d lines written, want 2000", n)
	}
}

// TestStreamLinesWritesALiveLineAtOnce: a line is written as soon as it arrives whole, not
// held back for the next one; a partial line waits for its end.
func TestStreamLinesWritesALiveLineAtOnce(t *testing.T) {
	pr, pw := io.Pipe()
	var got writes
	done := make(chan error)
	var cur Cursor
	go func() { done <- streamLines(pr, &got, "", false, cur.Resume()) }()
	wait := func(want []string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for fmt.Sprint(got.all()) != fmt.Sprint(want) {
			if time.Now().After(deadline) {
				t.Fatalf("writes %q, want %q", got.all(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	_, _ = pw.Write([]byte("2026-11-29T18:55:02Z one\n2026-11-29T18:55:03Z tw"))
	wait([]string{"one\n"})
	_, _ = pw.Write([]byte("o\n"))
	wait([]string{"one\n", "two\n"})
	pw.CloseWithError(errors.New("dropped"))
	if err := <-done; err == nil || err.Error() != "dropped" {
		t.Fatalf("got %v", err)
	}
}
