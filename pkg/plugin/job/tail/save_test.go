package tail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

// dirFiles reads every file of dir, names to contents.
func dirFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			// Renamed between the listing and the read (-f --save splitting a rank's file
			// while a test polls the directory): the next look sees the new name.
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// write writes each of lines to s's writer of the attempt it names: "rank/attempt text".
func write(t *testing.T, s *SaveFiles, lines ...string) {
	t.Helper()
	for _, l := range lines {
		var rank, attempt int
		head, text, _ := strings.Cut(l, " ")
		if _, err := fmt.Sscanf(head, "%d/%d", &rank, &attempt); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		text += "\n"
		if n, err := s.For(Target{Rank: rank, Attempt: attempt}).Write([]byte(text)); err != nil || n != len(text) {
			t.Fatalf("Write(%q) = %d, %v", l, n, err)
		}
	}
}

func TestSaveFilesSplitsRanks(t *testing.T) {
	for _, inPlace := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "logs")
		s, err := CreateSaveFiles(dir, 0, inPlace)
		if err != nil {
			t.Fatal(err)
		}
		// Several lines in one Write, as Logs writes a pod's whole log; the text is the log's
		// own, whatever it holds (even something that looks like a prefix).
		if _, err := s.For(Target{Rank: 0, Attempt: 1}).Write([]byte("a\n[rank 1] b\n")); err != nil {
			t.Fatal(err)
		}
		write(t, s, "10/1 c", "0/1 ", "10/1 d (cut")
		if !inPlace {
			// Nothing under its name before Close: only temporary files.
			for name := range dirFiles(t, dir) {
				if !strings.HasPrefix(name, ".") {
					t.Errorf("%s written before Close", name)
				}
			}
		}
		summary, err := s.Close(nil)
		want := map[string]string{"rank-0.log": "a\n[rank 1] b\n\n", "rank-10.log": "c\nd (cut\n"}
		if got := dirFiles(t, dir); err != nil || !maps.Equal(got, want) {
			t.Errorf("in place %v: %q, %v; want %q", inPlace, got, err, want)
		}
		if summary != "Saved 5 lines of 2 ranks in "+dir+" (rank-<N>.log)." {
			t.Errorf("summary %q", summary)
		}
	}
}

// A rank that had two attempts (retried: a new pod each) has a file per attempt, and no
// rank-<N>.log; a rank that had one keeps rank-<N>.log. Written once or followed, the files
// end the same; following, the rank's file is renamed when its second attempt comes, and
// the first attempt's later lines still reach it.
func TestSaveFilesRetriedRank(t *testing.T) {
	want := map[string]string{
		"rank-0.attempt-1.log": "zero a\nNCCL WARN peer lost\n",
		"rank-0.attempt-2.log": "zero b\nzero c\n",
		"rank-1.log":           "one a\none b\n",
	}
	for _, inPlace := range []bool{false, true} {
		dir := t.TempDir()
		// An earlier save, of when rank 0 had one attempt: its rank-0.log would read as the
		// whole rank's log.
		if err := os.WriteFile(filepath.Join(dir, "rank-0.log"), []byte("earlier save\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := CreateSaveFiles(dir, 0, inPlace)
		if err != nil {
			t.Fatal(err)
		}
		write(t, s, "0/1 zero a", "1/1 one a")
		if inPlace {
			if got := dirFiles(t, dir); !maps.Equal(got, map[string]string{"rank-0.log": "zero a\n", "rank-1.log": "one a\n"}) {
				t.Errorf("one attempt so far: %q", got)
			}
		}
		write(t, s, "0/2 zero b")
		if inPlace {
			if got := dirFiles(t, dir); !maps.Equal(got, map[string]string{"rank-0.attempt-1.log": "zero a\n", "rank-0.attempt-2.log": "zero b\n", "rank-1.log": "one a\n"}) {
				t.Errorf("once the second attempt came: %q", got)
			}
		}
		// The first attempt's last line, read after the second's first (the final read of a
		// follow reads every pod again).
		write(t, s, "0/1 NCCL WARN peer lost", "0/2 zero c", "1/1 one b")
		summary, err := s.Close(nil)
		if got := dirFiles(t, dir); err != nil || !maps.Equal(got, want) {
			t.Errorf("in place %v: %q, %v; want %q", inPlace, got, err, want)
		}
		if w := "Saved 6 lines of 2 ranks in " + dir + " (rank-<N>.log; rank 0 had 2 attempts: rank-0.attempt-1.log, rank-0.attempt-2.log)."; summary != w {
			t.Errorf("summary %q\nwant    %q", summary, w)
		}
	}
}

// The summary names the retried ranks' files, and no rank-<N>.log when every rank was retried;
// many retried ranks (a gang restart) are named up to a few.
func TestSaveFilesSummaryOfRetriedRanks(t *testing.T) {
	for _, tc := range []struct {
		lines []string
		want  string
	}{
		{[]string{"3/1 a", "3/2 b", "3/10 c"}, "Saved 3 lines of 1 rank in DIR (rank 3 had 3 attempts: rank-3.attempt-1.log, rank-3.attempt-2.log, rank-3.attempt-10.log)."},
		{[]string{"0/1 a", "0/2 b", "2/1 c", "2/2 d", "5/1 e"}, "Saved 5 lines of 3 ranks in DIR (rank-<N>.log; ranks 0, 2 had several attempts: rank-<N>.attempt-<A>.log)."},
		{[]string{"0/1 a", "0/2 a", "1/1 a", "1/2 a", "2/1 a", "2/2 a", "3/1 a", "3/2 a", "4/1 a", "4/2 a", "5/1 a", "5/2 a", "6/1 a", "6/2 a"},
			"Saved 14 lines of 7 ranks in DIR (ranks 0, 1, 2, 3, 4 and 2 more had several attempts: rank-<N>.attempt-<A>.log)."},
		{nil, "Saved 0 lines of 0 ranks in DIR (rank-<N>.log)."},
	} {
		dir := t.TempDir()
		s, err := CreateSaveFiles(dir, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		write(t, s, tc.lines...)
		summary, err := s.Close(nil)
		if want := strings.Replace(tc.want, "DIR", dir, 1); err != nil || summary != want {
			t.Errorf("%q: %q, %v\nwant %q", tc.lines, summary, err, want)
		}
		if got := len(dirFiles(t, dir)); got != strings.Count(strings.Join(tc.lines, " "), "/") {
			t.Errorf("%q: %d files", tc.lines, got)
		}
	}
}

// A read that fails leaves nothing: no half-written file, an earlier save's file untouched, and
// no directory the save made.
func TestSaveFilesFailedReadLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rank-0.log"), []byte("earlier save\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := CreateSaveFiles(dir, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	write(t, s, "0/1 new", "0/2 new", "1/1 new")
	if summary, err := s.Close(errors.New("reading the log of rank 2: boom")); err != nil || summary != "" {
		t.Errorf("Close = %q, %v", summary, err)
	}
	if got := dirFiles(t, dir); !maps.Equal(got, map[string]string{"rank-0.log": "earlier save\n"}) {
		t.Errorf("left %q", got)
	}

	made := filepath.Join(t.TempDir(), "new")
	s, err = CreateSaveFiles(made, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	write(t, s, "0/1 new")
	_, _ = s.Close(errors.New("boom"))
	if _, err := os.Stat(made); !os.IsNotExist(err) {
		t.Errorf("the directory the save made is still there: %v", err)
	}

	// Following, the files are written as lines come and kept whatever ends the follow.
	dir = t.TempDir()
	s, _ = CreateSaveFiles(dir, 2, true)
	write(t, s, "3/2 followed")
	if got := dirFiles(t, dir); !maps.Equal(got, map[string]string{"rank-3.attempt-2.log": "followed\n"}) {
		t.Errorf("while following: %q", got)
	}
	if summary, err := s.Close(errors.New("interrupted")); err != nil || !strings.Contains(summary, "rank-<N>.attempt-2.log") {
		t.Errorf("Close = %q, %v", summary, err)
	}
	if got := dirFiles(t, dir); !maps.Equal(got, map[string]string{"rank-3.attempt-2.log": "followed\n"}) {
		t.Errorf("after following: %q", got)
	}
}

func TestSaveDirRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckSaveDir(file); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("CheckSaveDir(file) = %v", err)
	}
	if err := CheckSaveDir(""); err == nil {
		t.Error("CheckSaveDir(\"\") accepted")
	}
	// Under a file: the directory cannot be made (permissions would not stop root, this does).
	if _, err := CreateSaveFiles(filepath.Join(file, "sub"), 0, false); err == nil {
		t.Error("CreateSaveFiles under a file succeeded")
	}
	if b, _ := os.ReadFile(file); string(b) != "x" {
		t.Errorf("the file became %q", b)
	}
}

func TestSaveFileName(t *testing.T) {
	got := []string{SaveFileName(0, 0), SaveFileName(12, 0), SaveFileName(3, 1), SaveFileName(3, 20)}
	if want := []string{"rank-0.log", "rank-12.log", "rank-3.attempt-1.log", "rank-3.attempt-20.log"}; !slices.Equal(got, want) {
		t.Errorf("%q, want %q", got, want)
	}
}

// attemptPod is the pod of one attempt of rank of the Job train, told apart from the rank's
// other attempts by its name, UID and creation time.
func attemptPod(rank int, name string, created int64) *fixture.PodWrapper {
	return fixture.RankPod(train().Obj(), rank).Name(name).UID("uid-" + name).Created(time.Unix(created, 0))
}

// A rank's attempts are its pods that have a log, oldest first, numbered from 1; a pod keeps
// its number when an older one is gone.
func TestAttemptsOfARetriedRank(t *testing.T) {
	pods := []corev1.Pod{
		attemptPod(0, "train-0-c", 9).Waiting("ContainerCreating", "").Val(), // no log yet: no attempt yet
		attemptPod(0, "train-0-b", 5).Exited(1, "Error", time.Time{}).Val(),
		attemptPod(1, "train-1-a", 1).Running(time.Time{}).Val(),
		attemptPod(0, "train-0-a", 1).Exited(1, "Error", time.Time{}).Val(),
	}
	attemptsOf := func(ts []Target) string {
		var got []string
		for _, tg := range ts {
			got = append(got, fmt.Sprintf("%d:%s:%d", tg.Rank, tg.Pod, tg.Attempt))
		}
		return strings.Join(got, " ")
	}
	if got, want := attemptsOf(Targets(pods, nil, "", false)), "0:train-0-a:1 0:train-0-b:2 0:train-0-c:0 1:train-1-a:1"; got != want {
		t.Errorf("Targets: %s, want %s", got, want)
	}
	// A replacement made within the second of the pod it replaces (creation is stamped to the
	// second) comes after it, whatever the names: the first ended before the second.
	sameSecond := []corev1.Pod{
		attemptPod(2, "train-2-a", 1).Running(time.Time{}).Val(),
		attemptPod(2, "train-2-z", 1).Exited(137, "Error", time.Unix(3, 0)).Val(),
	}
	if got, want := attemptsOf(Targets(sameSecond, nil, "", false)), "2:train-2-z:1 2:train-2-a:2"; got != want {
		t.Errorf("made in the same second, one running: %s, want %s", got, want)
	}
	sameSecond[0] = attemptPod(2, "train-2-a", 1).Succeeded(time.Unix(9, 0)).Val()
	if got, want := attemptsOf(Targets(sameSecond, nil, "", false)), "2:train-2-z:1 2:train-2-a:2"; got != want {
		t.Errorf("made in the same second, both ended: %s, want %s", got, want)
	}
	// Following: the first attempt's pod is deleted, the third starts; numbers stay.
	var a attempts
	first := Targets(pods, []int{0}, "", false)
	a.number(first)
	pods[0] = attemptPod(0, "train-0-c", 9).Running(time.Time{}).Val()
	later := Targets(pods[:2], []int{0}, "", false)
	a.number(later)
	if got, want := attemptsOf(later), "0:train-0-b:2 0:train-0-c:3"; got != want {
		t.Errorf("after a deleted pod: %s, want %s", got, want)
	}
}

// logs --save from the pods: a retried rank's two pods are two files, each with its pod's
// lines; a rank with one pod keeps rank-<N>.log; nothing goes to Out.
func TestLogsSaveRetriedRankFromPods(t *testing.T) {
	c := fake.NewClientset(train().Obj(),
		attemptPod(0, "train-0-b", 5).Running(time.Time{}).Obj(), attemptPod(0, "train-0-a", 1).Exited(1, "Error", time.Time{}).Obj(),
		attemptPod(1, "train-1-a", 1).Running(time.Time{}).Obj())
	srv := newLogServer()
	srv.add("train-0-a", 2)
	srv.add("train-0-b", 1)
	srv.add("train-1-a", 2)
	dir := t.TempDir()
	s, err := CreateSaveFiles(dir, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	e := &Engine{Client: c, Open: srv.open, Out: &out, ErrOut: io.Discard, Split: s.For}
	if err := e.Logs(context.Background(), Config{Namespace: "ns", Job: "train", Prefix: PrefixNone}); err != nil {
		t.Fatal(err)
	}
	summary, err := s.Close(nil)
	want := map[string]string{
		"rank-0.attempt-1.log": "train-0-a step 1\ntrain-0-a step 2\n",
		"rank-0.attempt-2.log": "train-0-b step 1\n",
		"rank-1.log":           "train-1-a step 1\ntrain-1-a step 2\n",
	}
	if got := dirFiles(t, dir); err != nil || !maps.Equal(got, want) || out.Len() != 0 {
		t.Errorf("%q, %v, stdout %q; want %q", got, err, out.String(), want)
	}
	if !strings.Contains(summary, "Saved 5 lines of 2 ranks") {
		t.Errorf("summary %q", summary)
	}
}

// logs -f --save: each attempt's lines reach its file as they come; rank 0 fails and its
// second attempt (a new pod) starts while followed, which splits rank 0's file in two; the
// end of the Job reads each pod's last lines into its file, and Close leaves the files whole.
func TestFollowSaveRetriedRank(t *testing.T) {
	c, watches := watching(train().Obj(), attemptPod(0, "train-0-a", 1).Running(time.Time{}).Obj(), attemptPod(1, "train-1-a", 1).Running(time.Time{}).Obj())
	srv := newLogServer()
	srv.add("train-0-a", 2)
	srv.add("train-1-a", 1)
	dir := t.TempDir()
	s, err := CreateSaveFiles(dir, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	out := &testbuf.Buffer{}
	run := startFollow(&Engine{Client: c, Open: srv.open, Out: out, ErrOut: io.Discard, Retry: 10 * time.Millisecond, Split: s.For}, Config{Namespace: "ns", Job: "train", Prefix: PrefixNone})
	<-watches
	<-watches
	saved := func(want map[string]string) func() bool {
		return func() bool { return maps.Equal(dirFiles(t, dir), want) }
	}
	waitFor(t, "the first lines in rank-0.log and rank-1.log", saved(map[string]string{
		"rank-0.log": "train-0-a step 1\ntrain-0-a step 2\n", "rank-1.log": "train-1-a step 1\n"}))

	// Rank 0 fails after one more line (its hanging stream does not deliver it), and is
	// retried in a new pod.
	ctx := context.Background()
	srv.add("train-0-a", 1)
	if _, err := c.CoreV1().Pods("ns").Update(ctx, attemptPod(0, "train-0-a", 1).Exited(1, "Error", time.Time{}).Obj(), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	srv.add("train-0-b", 2)
	if _, err := c.CoreV1().Pods("ns").Create(ctx, attemptPod(0, "train-0-b", 5).Running(time.Time{}).Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second attempt's file", saved(map[string]string{
		"rank-0.attempt-1.log": "train-0-a step 1\ntrain-0-a step 2\n", "rank-0.attempt-2.log": "train-0-b step 1\ntrain-0-b step 2\n",
		"rank-1.log": "train-1-a step 1\n"}))

	srv.add("train-0-b", 1)
	srv.add("train-1-a", 1)
	if _, err := c.BatchV1().Jobs("ns").UpdateStatus(ctx, train().Condition(batchv1.JobComplete, "", "").Obj(), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	run.wait(t)
	if run.err != nil || run.res.Status != jobstatus.Complete {
		t.Fatalf("Follow = %+v, %v", run.res, run.err)
	}
	summary, err := s.Close(nil)
	want := map[string]string{
		"rank-0.attempt-1.log": "train-0-a step 1\ntrain-0-a step 2\ntrain-0-a step 3\n",
		"rank-0.attempt-2.log": "train-0-b step 1\ntrain-0-b step 2\ntrain-0-b step 3\n",
		"rank-1.log":           "train-1-a step 1\ntrain-1-a step 2\n",
	}
	if got := dirFiles(t, dir); err != nil || !maps.Equal(got, want) || out.String() != "" {
		t.Errorf("%q, %v, stdout %q; want %q", got, err, out.String(), want)
	}
	if w := "Saved 8 lines of 2 ranks in " + dir + " (rank-<N>.log; rank 0 had 2 attempts: rank-0.attempt-1.log, rank-0.attempt-2.log)."; summary != w {
		t.Errorf("summary %q, want %q", summary, w)
	}
	// Closed: a write after the end is refused, and makes no file.
	if _, err := s.For(Target{Rank: 5, Attempt: 1}).Write([]byte("late\n")); err == nil || len(dirFiles(t, dir)) != 3 {
		t.Errorf("a write after Close: %v, %d files", err, len(dirFiles(t, dir)))
	}
}
