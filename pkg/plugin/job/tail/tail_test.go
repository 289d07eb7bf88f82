package tail

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/outage"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

var t0 = time.Date(2026, 11, 29, 18, 55, 2, 0, time.UTC)

// train is the Job the tests tail: two ranks of one container "main".
func train() *fixture.JobWrapper {
	return fixture.Job("train").Namespace("ns").UID("job-uid").Completions(2).Container(corev1.Container{Name: "main"})
}

// logServer plays the API server's log endpoint for the engine: per pod, a log that tests
// append to; followed streams serve what is there and then hang, as KWOK's do, unless
// dropAfter says to fail a stream after that many lines.
type logServer struct {
	mu        sync.Mutex
	logs      map[string][]logLine
	dropAfter map[string]int // pod -> lines before the next followed stream of it fails
	failOpens map[string]int // pod -> opens that fail before one succeeds (no log yet)
	requests  []string
	opened    chan string
	// cut is closed when the server goes down (see down): live streams fail and new opens are
	// refused until up.
	cut      chan struct{}
	refusals int
}

var errRefused = fmt.Errorf("dial tcp 127.0.0.1:6443: connect: %w", syscall.ECONNREFUSED)

// down cuts every live stream and refuses opens, as a stopped API server does.
func (s *logServer) down() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.cut)
}

func (s *logServer) up() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut = make(chan struct{})
}

func (s *logServer) refused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refusals
}

func newLogServer() *logServer {
	return &logServer{logs: map[string][]logLine{}, dropAfter: map[string]int{}, failOpens: map[string]int{}, opened: make(chan string, 1000), cut: make(chan struct{})}
}

func (s *logServer) add(pod string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; i < n; i++ {
		k := len(s.logs[pod]) + 1
		s.logs[pod] = append(s.logs[pod], logLine{t0.Add(time.Duration(k) * 300 * time.Millisecond), fmt.Sprintf("%s step %d", pod, k)})
	}
}

func (s *logServer) open(ctx context.Context, ns, pod string, o *corev1.PodLogOptions) (io.ReadCloser, error) {
	s.mu.Lock()
	desc := fmt.Sprintf("%s follow=%v ts=%v", pod, o.Follow, o.Timestamps)
	if o.TailLines != nil {
		desc += fmt.Sprintf(" tail=%d", *o.TailLines)
	}
	if o.SinceSeconds != nil {
		desc += fmt.Sprintf(" since=%ds", *o.SinceSeconds)
	}
	if o.SinceTime != nil {
		desc += " sinceTime=" + o.SinceTime.UTC().Format(time.RFC3339)
	}
	s.requests = append(s.requests, desc)
	cut := s.cut
	select {
	case <-cut:
		s.refusals++
		s.mu.Unlock()
		return nil, errRefused
	default:
	}
	if s.failOpens[pod] > 0 {
		s.failOpens[pod]--
		s.mu.Unlock()
		return nil, fmt.Errorf("no logs found for container %q in pod %q", o.Container, pod)
	}
	log := s.logs[pod]
	drop, dropping := s.dropAfter[pod]
	delete(s.dropAfter, pod)
	s.mu.Unlock()
	var since time.Time
	if o.SinceTime != nil {
		since = o.SinceTime.Time
	}
	if o.TailLines != nil && int(*o.TailLines) < len(log) {
		log = log[len(log)-int(*o.TailLines):]
	}
	var b strings.Builder
	for _, l := range log {
		if !since.IsZero() && l.ts.Before(since) {
			continue
		}
		if o.Timestamps {
			b.WriteString(l.ts.Format(time.RFC3339Nano) + " ")
		}
		b.WriteString(l.text + "\n")
	}
	body := b.String()
	select {
	case s.opened <- pod:
	default:
	}
	if !o.Follow {
		return io.NopCloser(strings.NewReader(body)), nil
	}
	if dropping {
		return io.NopCloser(newBreakAfter(body, drop, true)), nil
	}
	return &hanging{r: strings.NewReader(body), ctx: ctx, cut: cut}, nil
}

// hanging serves its content, then blocks until the request is canceled: a stream the
// server never closes.
type hanging struct {
	r   io.Reader
	ctx context.Context
	cut <-chan struct{}
}

func (h *hanging) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if n > 0 || !errors.Is(err, io.EOF) {
		return n, err
	}
	select {
	case <-h.ctx.Done():
		return 0, h.ctx.Err()
	case <-h.cut:
		return 0, io.ErrUnexpectedEOF
	}
}
func (h *hanging) Close() error { return nil }

func TestLogsRankOrder(t *testing.T) {
	c := fake.NewClientset(train().Obj(), fixture.RankPod(train().Obj(), 2).Name("train-2").Created(time.Unix(1, 0)).Running(time.Time{}).Obj(), fixture.RankPod(train().Obj(), 0).Name("train-0").Created(time.Unix(1, 0)).Succeeded(time.Time{}).Obj(),
		fixture.RankPod(train().Obj(), 1).Name("train-1").Created(time.Unix(1, 0)).Waiting("ContainerCreating", "").Obj(), fixture.RankPod(train().Obj(), 3).Name("train-3").Created(time.Unix(1, 0)).Running(time.Time{}).Obj())
	srv := newLogServer()
	srv.add("train-0", 2)
	srv.add("train-2", 1)
	srv.add("train-3", 1)
	var out, errOut bytes.Buffer
	e := &Engine{Client: c, Open: srv.open, Out: &out, ErrOut: &errOut}
	if err := e.Logs(context.Background(), Config{Namespace: "ns", Job: "train", Prefix: PrefixRank, MaxLogRequests: 2}); err != nil {
		t.Fatal(err)
	}
	want := "[rank 0] train-0 step 1\n[rank 0] train-0 step 2\n[rank 2] train-2 step 1\n[rank 3] train-3 step 1\n"
	if out.String() != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out.String(), want)
	}
	if errOut.String() != "rank 1 (pod train-1): no log yet, the container has not started\n" {
		t.Errorf("stderr: %q", errOut.String())
	}
	var calls []string
	for _, a := range c.Actions() {
		calls = append(calls, a.GetVerb()+" "+a.GetResource().Resource)
	}
	if strings.Join(calls, ",") != "list pods,get jobs" && strings.Join(calls, ",") != "get jobs,list pods" {
		t.Errorf("API calls: %v, want one get and one list", calls)
	}
}

func TestLogsOptions(t *testing.T) {
	c := fake.NewClientset(train().Obj(), fixture.RankPod(train().Obj(), -1).Name("train-0").Created(time.Unix(1, 0)).Running(time.Time{}).Obj())
	srv := newLogServer()
	srv.add("train-0", 3)
	var out bytes.Buffer
	e := &Engine{Client: c, Open: srv.open, Out: &out, ErrOut: io.Discard}
	cfg := Config{Namespace: "ns", Job: "train", Prefix: PrefixPod, TailLines: ptr.To[int64](2), Since: 1500 * time.Millisecond, Timestamps: true}
	if err := e.Logs(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	want := "[pod/train-0] 2026-11-29T18:55:02.6Z train-0 step 2\n[pod/train-0] 2026-11-29T18:55:02.9Z train-0 step 3\n"
	if out.String() != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out.String(), want)
	}
	if got := srv.requests; len(got) != 1 || got[0] != "train-0 follow=false ts=true tail=2 since=2s" {
		t.Errorf("requests: %q", got)
	}
}

func TestLogsJobNotFound(t *testing.T) {
	e := &Engine{Client: fake.NewClientset(), Out: io.Discard, ErrOut: io.Discard}
	err := e.Logs(context.Background(), Config{Namespace: "ns", Job: "nope"})
	if err == nil || !strings.Contains(err.Error(), `"nope" not found in namespace "ns"`) {
		t.Fatalf("got %v", err)
	}
}

// watching returns a clientset that reports on started when the pod and job watches are open,
// so tests change objects only once the engine can see the change.
func watching(objs ...runtime.Object) (*fake.Clientset, chan string) {
	c := fake.NewClientset(objs...)
	started := make(chan string, 10)
	c.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		started <- a.GetResource().Resource
		return false, nil, nil
	})
	return c, started
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type followRun struct {
	res  jobstatus.Result
	err  error
	done chan struct{}
}

func startFollow(e *Engine, cfg Config) *followRun {
	r := &followRun{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.res, r.err = e.Follow(context.Background(), cfg)
	}()
	return r
}

// followRank0 starts Follow on the Job train, whose one rank, rank0, is running and has a line
// to print; it returns once both watches are open and that line is out, so that what the test
// changes next happens to a job being followed.
func followRank0(t *testing.T, rank0 *corev1.Pod) (*fake.Clientset, *followRun) {
	t.Helper()
	c, watches := watching(train().Obj(), rank0)
	srv := newLogServer()
	srv.add("train-0", 1)
	out := &testbuf.Buffer{}
	run := startFollow(&Engine{Client: c, Open: srv.open, Out: out, ErrOut: io.Discard}, Config{Namespace: "ns", Job: "train"})
	<-watches
	<-watches
	waitFor(t, "the first line", func() bool { return out.String() != "" })
	return c, run
}

// followUntilTheEnd runs e.Follow until the test ends, for a test that looks only at what it
// writes and the requests it sends.
func followUntilTheEnd(t *testing.T, e *Engine, cfg Config) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _, _ = e.Follow(ctx, cfg) }()
}

func (r *followRun) wait(t *testing.T) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not end")
	}
}

func sortedLines(s string) map[string]int {
	m := map[string]int{}
	for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		m[l]++
	}
	return m
}

// TestFollow runs a job through its life: rank 0 streams, its stream drops and resumes, rank 1
// appears late, the server never closes a stream, lines written just before the end are read
// by the last read, and the Job's completion ends following with its status.
func TestFollow(t *testing.T) {
	c, watches := watching(train().Obj(), fixture.RankPod(train().Obj(), 0).Name("train-0").Created(time.Unix(1, 0)).Running(time.Time{}).Obj())
	srv := newLogServer()
	srv.add("train-0", 3)
	srv.dropAfter["train-0"] = 2
	out := &testbuf.Buffer{}
	var errOut testbuf.Buffer
	e := &Engine{Client: c, Open: srv.open, Out: out, ErrOut: &errOut, Retry: 10 * time.Millisecond}
	run := startFollow(e, Config{Namespace: "ns", Job: "train", Prefix: PrefixRank})
	<-watches
	<-watches
	waitFor(t, "rank 0's lines", func() bool { return strings.Count(out.String(), "\n") == 3 })

	// A late pod: Pending first (no stream), then Running.
	late := fixture.RankPod(train().Obj(), 1).Name("train-1").Created(time.Unix(2, 0)).Waiting("ContainerCreating", "").Val()
	if _, err := c.CoreV1().Pods("ns").Create(context.Background(), &late, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	srv.add("train-1", 2)
	late = fixture.RankPod(train().Obj(), 1).Name("train-1").Created(time.Unix(2, 0)).Running(time.Time{}).Val()
	if _, err := c.CoreV1().Pods("ns").Update(context.Background(), &late, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "rank 1's lines", func() bool { return strings.Count(out.String(), "\n") == 5 })

	// Lines the hanging streams never deliver, then the end of the Job.
	srv.add("train-0", 2)
	srv.add("train-1", 1)
	if _, err := c.BatchV1().Jobs("ns").UpdateStatus(context.Background(), train().Condition(batchv1.JobComplete, "", "").Obj(), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	run.wait(t)
	if run.err != nil || run.res.Status != jobstatus.Complete {
		t.Fatalf("Follow = %+v, %v", run.res, run.err)
	}
	want := map[string]int{}
	for i := 1; i <= 5; i++ {
		want[fmt.Sprintf("[rank 0] train-0 step %d", i)] = 1
	}
	for i := 1; i <= 3; i++ {
		want[fmt.Sprintf("[rank 1] train-1 step %d", i)] = 1
	}
	if got := sortedLines(out.String()); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("lines (each exactly once):\n%v\nwant\n%v\nstdout:\n%s", got, want, out.String())
	}
	// A drop resumed at once is no news: -v=2 shows it.
	if errOut.String() != "" {
		t.Errorf("stderr: %q, want nothing", errOut.String())
	}
}

// TestFollowOutageIsTwoLines: the server goes away while 64 ranks are followed, long enough
// to be an outage, and comes back. Every stream is cut and every reopen refused many times;
// stderr says so in one line and the return in another, and no line is lost or repeated.
func TestFollowOutageIsTwoLines(t *testing.T) {
	const ranks = 64
	job := fixture.Job("train").Namespace("ns").UID("job-uid").Completions(ranks).Container(corev1.Container{Name: "main"})
	objs := []runtime.Object{job.Obj()}
	srv := newLogServer()
	for r := 0; r < ranks; r++ {
		name := fmt.Sprintf("train-%d", r)
		objs = append(objs, fixture.RankPod(job.Obj(), r).Name(name).Created(time.Unix(1, 0)).Running(time.Time{}).Obj())
		srv.add(name, 1)
	}
	c, watches := watching(objs...)
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 1, 18, 40, 12, 0, time.Local))
	out, errOut := &testbuf.Buffer{}, &testbuf.Buffer{}
	e := &Engine{Client: c, Open: srv.open, Out: out, ErrOut: errOut, Retry: 2 * time.Millisecond, Clock: clk}
	run := startFollow(e, Config{Namespace: "ns", Job: "train", Prefix: PrefixRank, MaxLogRequests: ranks})
	<-watches
	<-watches
	waitFor(t, "every rank's first line", func() bool { return strings.Count(out.String(), "\n") == ranks })

	srv.down()
	waitFor(t, "every stream refused", func() bool { return srv.refused() >= 3*ranks })
	clk.SetTime(clk.Now().Add(2 * outage.Quiet))
	before := srv.refused()
	waitFor(t, "the outage line", func() bool { return strings.Contains(errOut.String(), "unreachable") })
	waitFor(t, "more refusals", func() bool { return srv.refused() >= before+3*ranks })
	for r := 0; r < ranks; r++ {
		srv.add(fmt.Sprintf("train-%d", r), 1) // written while the server was away
	}
	srv.up()
	waitFor(t, "the lines written during the outage", func() bool { return strings.Count(out.String(), "\n") == 2*ranks })
	if _, err := c.BatchV1().Jobs("ns").UpdateStatus(context.Background(), job.Condition(batchv1.JobComplete, "", "").Obj(), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	run.wait(t)
	if run.err != nil || run.res.Status != jobstatus.Complete {
		t.Fatalf("Follow = %+v, %v", run.res, run.err)
	}
	want := map[string]int{}
	for r := 0; r < ranks; r++ {
		for k := 1; k <= 2; k++ {
			want[fmt.Sprintf("[rank %d] train-%d step %d", r, r, k)] = 1
		}
	}
	if got := sortedLines(out.String()); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("lines (each exactly once):\n%v\nwant\n%v", got, want)
	}
	lines := strings.Split(strings.TrimSuffix(errOut.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "following job.batch/train: the API server is unreachable since 18:40:12 (") ||
		!strings.HasPrefix(lines[1], "following job.batch/train: the API server answers again (unreachable for ") {
		t.Errorf("stderr:\n%s\nwant the outage and the return, one line each", errOut.String())
	}
}

func TestFollowEndsWithJobStatus(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *fake.Clientset) error
		want   jobstatus.Status
	}{
		{"failed", func(c *fake.Clientset) error {
			_, err := c.BatchV1().Jobs("ns").UpdateStatus(context.Background(), train().Condition(batchv1.JobFailureTarget, "", "").Obj(), metav1.UpdateOptions{})
			return err
		}, jobstatus.Error},
		{"deleted", func(c *fake.Clientset) error {
			return c.BatchV1().Jobs("ns").Delete(context.Background(), "train", metav1.DeleteOptions{})
		}, jobstatus.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, run := followRank0(t, fixture.RankPod(train().Obj(), -1).Name("train-0").Created(time.Unix(1, 0)).Running(time.Time{}).Obj())
			if err := tc.change(c); err != nil {
				t.Fatal(err)
			}
			run.wait(t)
			if run.err != nil || run.res.Status != tc.want {
				t.Fatalf("Follow = %+v, %v; want %s", run.res, run.err, tc.want)
			}
		})
	}
}

// A canceled job's ranks get SIGTERM and may print their last lines (a final checkpoint) before
// they exit: following goes on while the Job is being deleted, until each rank's stream is over
// or its pod is gone.
func TestFollowWaitsForCanceledRanksToStop(t *testing.T) {
	rank0 := func() *fixture.PodWrapper {
		return fixture.RankPod(train().Obj(), -1).Name("train-0").Created(time.Unix(1, 0)).Running(time.Time{})
	}
	c, run := followRank0(t, rank0().Obj())
	ctx := context.Background()
	deleting := train().Obj()
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	if _, err := c.BatchV1().Jobs("ns").Update(ctx, deleting, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	terminating := rank0().Obj()
	terminating.DeletionTimestamp = &metav1.Time{Time: t0}
	if _, err := c.CoreV1().Pods("ns").Update(ctx, terminating, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-run.done:
		t.Fatalf("Follow ended while the canceled rank was still stopping: %+v, %v", run.res, run.err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := c.CoreV1().Pods("ns").Delete(ctx, "train-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	run.wait(t)
	if run.err != nil || run.res.Status != jobstatus.Canceled {
		t.Fatalf("Follow = %+v, %v; want Canceled", run.res, run.err)
	}
}

func TestFollowTerminalJobReadsOnceAndEnds(t *testing.T) {
	c := fake.NewClientset(train().Condition(batchv1.JobComplete, "", "").Obj(), fixture.RankPod(train().Obj(), -1).Name("train-0").Created(time.Unix(1, 0)).Succeeded(time.Time{}).Obj())
	srv := newLogServer()
	srv.add("train-0", 2)
	out := &testbuf.Buffer{}
	res, err := (&Engine{Client: c, Open: srv.open, Out: out, ErrOut: io.Discard}).Follow(context.Background(), Config{Namespace: "ns", Job: "train", Prefix: PrefixNone})
	if err != nil || res.Status != jobstatus.Complete || out.String() != "train-0 step 1\ntrain-0 step 2\n" {
		t.Fatalf("Follow = %+v, %v, stdout %q", res, err, out.String())
	}
}

func TestFollowRefusesAboveMaxLogRequests(t *testing.T) {
	c := fake.NewClientset(train().Obj(), fixture.RankPod(train().Obj(), 0).Name("train-0").Created(time.Unix(1, 0)).Running(time.Time{}).Obj(), fixture.RankPod(train().Obj(), 1).Name("train-1").Created(time.Unix(1, 0)).Running(time.Time{}).Obj(),
		fixture.RankPod(train().Obj(), 2).Name("train-2").Created(time.Unix(1, 0)).Running(time.Time{}).Obj())
	srv := newLogServer()
	_, err := (&Engine{Client: c, Open: srv.open, Out: io.Discard, ErrOut: io.Discard}).Follow(context.Background(),
		Config{Namespace: "ns", Job: "train", MaxLogRequests: 2})
	if err == nil || !strings.Contains(err.Error(), "needs 3 log streams at once, more than --max-log-requests=2") {
		t.Fatalf("got %v", err)
	}
	if len(srv.requests) != 0 {
		t.Fatalf("streams opened before refusing: %v", srv.requests)
	}
	// --rank brings it under the limit.
	c2, _ := watching(train().Condition(batchv1.JobComplete, "", "").Obj(), fixture.RankPod(train().Obj(), 0).Name("train-0").Created(time.Unix(1, 0)).Running(time.Time{}).Obj(), fixture.RankPod(train().Obj(), 1).Name("train-1").Created(time.Unix(1, 0)).Running(time.Time{}).Obj(),
		fixture.RankPod(train().Obj(), 2).Name("train-2").Created(time.Unix(1, 0)).Running(time.Time{}).Obj())
	if _, err := (&Engine{Client: c2, Open: srv.open, Out: io.Discard, ErrOut: io.Discard}).Follow(context.Background(),
		Config{Namespace: "ns", Job: "train", MaxLogRequests: 2, Ranks: []int{1, 2}}); err != nil {
		t.Fatal(err)
	}
}

func TestFollowMissingJob(t *testing.T) {
	_, err := (&Engine{Client: fake.NewClientset(), Out: io.Discard, ErrOut: io.Discard}).Follow(context.Background(), Config{Namespace: "ns", Job: "nope"})
	if err == nil || !strings.Contains(err.Error(), `"nope" not found`) {
		t.Fatalf("got %v", err)
	}
}

func TestFollowInterrupted(t *testing.T) {
	c, watches := watching(train().Obj(), fixture.RankPod(train().Obj(), -1).Name("train-0").Created(time.Unix(1, 0)).Running(time.Time{}).Obj())
	srv := newLogServer()
	srv.add("train-0", 1)
	ctx, cancel := context.WithCancel(context.Background())
	out := &testbuf.Buffer{}
	done := make(chan error)
	go func() {
		_, err := (&Engine{Client: c, Open: srv.open, Out: out, ErrOut: io.Discard}).Follow(ctx, Config{Namespace: "ns", Job: "train"})
		done <- err
	}()
	<-watches
	waitFor(t, "the first line", func() bool { return out.String() != "" })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Follow ignored the canceled context")
	}
}

// TestFollowStartsStreamsFromTheList: the streams start from the first pod list, before (and
// whether or not) any watch is open, and the watches continue from each list's
// resourceVersion, so nothing between the list and the watch is missed.
func TestFollowStartsStreamsFromTheList(t *testing.T) {
	c := fake.NewClientset(train().Obj(), fixture.RankPod(train().Obj(), 0).Name("train-0").Created(time.Unix(1, 0)).Running(time.Time{}).Obj(), fixture.RankPod(train().Obj(), 1).Name("train-1").Created(time.Unix(1, 0)).Running(time.Time{}).Obj())
	c.PrependReactor("list", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		// The fake tracker leaves resourceVersion empty; a server always sets one.
		obj, err := c.Tracker().List(a.GetResource(), a.GetResource().GroupVersion().WithKind(kindOf(a.GetResource().Resource)), a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		switch l := obj.(type) {
		case *corev1.PodList:
			l.ResourceVersion = "41"
		case *batchv1.JobList:
			l.ResourceVersion = "42"
		}
		return true, obj, nil
	})
	release := make(chan struct{})
	watchRVs := make(chan string, 4)
	c.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		watchRVs <- a.GetResource().Resource + "@" + a.(k8stesting.WatchActionImpl).GetWatchRestrictions().ResourceVersion
		<-release // a watch that takes its time to open (the fake opens one at a time)
		return false, nil, nil
	})
	srv := newLogServer()
	srv.add("train-0", 1)
	srv.add("train-1", 1)
	out := &testbuf.Buffer{}
	followUntilTheEnd(t, &Engine{Client: c, Open: srv.open, Out: out, ErrOut: io.Discard}, Config{Namespace: "ns", Job: "train", Prefix: PrefixRank})
	waitFor(t, "both ranks' first lines with no watch open", func() bool { return strings.Count(out.String(), "\n") == 2 })
	got := map[string]bool{<-watchRVs: true}
	close(release)
	got[<-watchRVs] = true
	if !got["jobs@42"] || !got["pods@41"] {
		t.Errorf("watches opened at %v, want jobs@42 and pods@41 (the lists' versions)", got)
	}
}

func kindOf(resource string) string {
	if resource == "jobs" {
		return "Job"
	}
	return "Pod"
}

// TestFollowRequests counts what following sends: one Job list and one pod list, one watch of
// each, one stream per rank; at the end one pod list and one read per rank. No get per pod.
func TestFollowRequests(t *testing.T) {
	c, watches := watching(train().Obj(), fixture.RankPod(train().Obj(), 0).Name("train-0").Created(time.Unix(1, 0)).Running(time.Time{}).Obj(), fixture.RankPod(train().Obj(), 1).Name("train-1").Created(time.Unix(1, 0)).Running(time.Time{}).Obj(),
		fixture.RankPod(train().Obj(), 2).Name("train-2").Created(time.Unix(1, 0)).Running(time.Time{}).Obj())
	srv := newLogServer()
	for _, p := range []string{"train-0", "train-1", "train-2"} {
		srv.add(p, 1)
	}
	out := &testbuf.Buffer{}
	run := startFollow(&Engine{Client: c, Open: srv.open, Out: out, ErrOut: io.Discard}, Config{Namespace: "ns", Job: "train"})
	<-watches
	<-watches
	waitFor(t, "every rank's line", func() bool { return strings.Count(out.String(), "\n") == 3 })
	if _, err := c.BatchV1().Jobs("ns").UpdateStatus(context.Background(), train().Condition(batchv1.JobComplete, "", "").Obj(), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	run.wait(t)
	counts := map[string]int{}
	for _, a := range c.Actions() {
		if a.GetVerb() == "update" {
			continue // the test's own
		}
		counts[a.GetVerb()+" "+a.GetResource().Resource]++
	}
	want := map[string]int{"list jobs": 1, "list pods": 2, "watch jobs": 1, "watch pods": 1}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("API requests %v, want %v", counts, want)
	}
	if n := len(srv.requests); n != 6 {
		t.Errorf("%d log requests, want 3 streams and 3 last reads: %v", n, srv.requests)
	}
}

// TestFollowRelistsWhenTheWatchExpires: a watch whose resourceVersion the server no longer has
// (410 Gone) makes the engine list again and follow what the new list shows.
func TestFollowRelistsWhenTheWatchExpires(t *testing.T) {
	c := fake.NewClientset(train().Obj(), fixture.RankPod(train().Obj(), 0).Name("train-0").Created(time.Unix(1, 0)).Running(time.Time{}).Obj())
	var mu sync.Mutex
	podWatches := 0
	c.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		podWatches++
		if podWatches > 1 {
			return false, nil, nil
		}
		// Meanwhile a pod appeared that this watch will never report; then the version expires.
		late := fixture.RankPod(train().Obj(), 1).Name("train-1").Created(time.Unix(2, 0)).Running(time.Time{}).Val()
		if err := c.Tracker().Add(&late); err != nil {
			t.Error(err)
		}
		w := watch.NewFake()
		go w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
		return true, w, nil
	})
	srv := newLogServer()
	srv.add("train-0", 1)
	srv.add("train-1", 1)
	out := &testbuf.Buffer{}
	followUntilTheEnd(t, &Engine{Client: c, Open: srv.open, Out: out, ErrOut: io.Discard, Retry: 10 * time.Millisecond}, Config{Namespace: "ns", Job: "train", Prefix: PrefixRank})
	waitFor(t, "the pod found by the second list", func() bool { return strings.Contains(out.String(), "[rank 1] train-1 step 1\n") })
	lists := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "pods" {
			lists++
		}
	}
	if lists != 2 {
		t.Errorf("%d pod lists, want 2 (the first, and one after the expired watch)", lists)
	}
}

// TestFollowWaitsQuietlyForAFirstLog: a container that has just started may have no log for a
// moment; the engine retries soon and says nothing unless it lasts.
func TestFollowWaitsQuietlyForAFirstLog(t *testing.T) {
	for _, tc := range []struct {
		fails    int
		wantNote bool
	}{{2, false}, {quietOpenFailures + 1, true}} {
		t.Run(fmt.Sprint(tc.fails, " failures"), func(t *testing.T) {
			c, _ := watching(train().Obj(), fixture.RankPod(train().Obj(), -1).Name("train-0").Created(time.Unix(1, 0)).Running(time.Time{}).Obj())
			srv := newLogServer()
			srv.add("train-0", 1)
			srv.failOpens["train-0"] = tc.fails
			out, errOut := &testbuf.Buffer{}, &testbuf.Buffer{}
			followUntilTheEnd(t, &Engine{Client: c, Open: srv.open, Out: out, ErrOut: errOut, Retry: 20 * time.Millisecond}, Config{Namespace: "ns", Job: "train"})
			waitFor(t, "the line", func() bool { return out.String() == "[rank 0] train-0 step 1\n" })
			if got := strings.Contains(errOut.String(), "rank 0 (pod train-0): no log yet, retrying"); got != tc.wantNote || strings.Contains(errOut.String(), "dropped") {
				t.Errorf("stderr %q", errOut.String())
			}
		})
	}
}

// TestFollowStuck: logs -f on a job whose rank 1 is running and rank 0 cannot be scheduled says
// so once on ErrOut, keeps following the running rank, and ends with Stuck after StuckTimeout;
// a pod update that changes only the scheduler's words says nothing more.
func TestFollowStuck(t *testing.T) {
	pending := fixture.RankPod(train().Obj(), 0).Name("train-0").Created(time.Unix(1, 0)).
		Unschedulable("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", time.Unix(2, 0)).Obj()
	c, watches := watching(train().Obj(), pending, fixture.RankPod(train().Obj(), 1).Name("train-1").Created(time.Unix(1, 0)).Running(time.Time{}).Obj())
	srv := newLogServer()
	srv.add("train-1", 1)
	out, errOut := &testbuf.Buffer{}, &testbuf.Buffer{}
	start := time.Now()
	run := startFollow(&Engine{Client: c, Open: srv.open, Out: out, ErrOut: errOut}, Config{Namespace: "ns", Job: "train", StuckTimeout: time.Second})
	<-watches
	<-watches
	waitFor(t, "the stuck line", func() bool { return strings.Contains(errOut.String(), "cannot start") })
	again := pending.DeepCopy()
	again.Status.Conditions[0].Message = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
	if _, err := c.CoreV1().Pods("ns").UpdateStatus(context.Background(), again, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	run.wait(t)
	if exitcode.Of(run.err) != exitcode.Stuck || time.Since(start) < time.Second {
		t.Fatalf("Follow = %v (exit code %d) after %s, want Stuck after 1s", run.err, exitcode.Of(run.err), time.Since(start))
	}
	want := "rank 0 (pod train-0) cannot start: Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.; see why: kubectl tao diagnose train -n ns\n"
	if errOut.String() != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", errOut.String(), want)
	}
	if !strings.Contains(out.String(), "train-1 step 1") {
		t.Errorf("stdout = %q: the running rank was not followed", out.String())
	}
}

func TestLostReason(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		want string
	}{
		{"running", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, ""},
		{"succeeded", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, ""},
		{"failed", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}, "failed"},
		{"deleted", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}, "deleted"},
		{"evicted", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI"}}}}, "EvictionByEvictionAPI"},
	} {
		if got := lostReason(&tc.pod); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestLostPods(t *testing.T) {
	at := time.Unix(1700000000, 0)
	job := fixture.Job("train").Namespace("ns").UID("job-uid").Completions(3).Container(corev1.Container{Name: "main"}).Obj()
	other := fixture.Job("other").Namespace("ns").UID("other-uid").Completions(3).Container(corev1.Container{Name: "main"}).Obj()
	pod := func(rank int) *fixture.PodWrapper { return fixture.RankPod(job, rank).Running(at) }
	pods := func(ps ...*fixture.PodWrapper) map[types.UID]*corev1.Pod {
		m := map[types.UID]*corev1.Pod{}
		for _, p := range ps {
			m[p.Obj().UID] = p.Obj()
		}
		return m
	}
	names := func(ps []*corev1.Pod) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		pods map[types.UID]*corev1.Pod
		size int32
		said map[types.UID]bool
		want []string
	}{
		{"all running", pods(pod(0), pod(1), pod(2)), 3, nil, nil},
		{"two deleted, in rank order", pods(pod(0), pod(2).Deleting(at), pod(1).Phase(corev1.PodFailed)), 3, nil,
			[]string{"train-1-abcde", "train-2-abcde"}},
		{"already said", pods(pod(0), pod(1).Deleting(at)), 3, map[types.UID]bool{"uid-train-1-abcde": true}, nil},
		{"removed by a shrink", pods(pod(0), pod(1), pod(2).Deleting(at)), 2, nil, nil},
		{"another job's pod", pods(pod(0), pod(1).Deleting(at), fixture.RankPod(other, 2).Deleting(at)), 3, nil, []string{"train-1-abcde"}},
		// The Job controller deletes the other ranks once rank 0 succeeded: the job completes.
		{"rank 0 succeeded", pods(fixture.RankPod(job, 0).Succeeded(at), pod(1).Deleting(at), pod(2).Deleting(at)), 3, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(lostPods(tc.pods, job.UID, tc.size, tc.said)); !slices.Equal(got, tc.want) {
				t.Errorf("lostPods = %v, want %v", got, tc.want)
			}
		})
	}
}
