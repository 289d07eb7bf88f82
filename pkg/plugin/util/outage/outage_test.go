package outage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
)

var errRefused = fmt.Errorf(`Get "https://127.0.0.1:6443/api/v1/pods": dial tcp 127.0.0.1:6443: connect: %w`, syscall.ECONNREFUSED)

// Many streams failing for two minutes print one line when the outage has lasted Quiet and one
// when the server is back; a blip shorter than Quiet prints nothing.
func TestReporterSaysAnOutageOnce(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 1, 18, 40, 12, 0, time.Local))
	var out bytes.Buffer
	r := New(&out, "following job.batch/train", clk)

	// A blip: a failure and a success within Quiet.
	r.Failed(errRefused)
	clk.SetTime(clk.Now().Add(Quiet / 2))
	r.OK()
	if out.Len() != 0 {
		t.Fatalf("a blip printed %q", out.String())
	}

	start := clk.Now()
	for i := 0; i < 120; i++ { // 64 streams and 2 watches retrying every second for two minutes
		for s := 0; s < 66; s++ {
			if !r.Failed(errRefused) {
				t.Fatal("connection refused is not an outage")
			}
		}
		clk.SetTime(clk.Now().Add(time.Second))
	}
	r.OK()
	r.OK()
	want := fmt.Sprintf("following job.batch/train: the API server is unreachable since %s (%v); retrying\n"+
		"following job.batch/train: the API server answers again (unreachable for 2m0s)\n", start.Format("15:04:05"), errRefused)
	if out.String() != want {
		t.Fatalf("stderr:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestIs(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.Canceled, false},
		{errRefused, true},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{io.ErrUnexpectedEOF, true},
		{apierrors.NewTooManyRequests("slow down", 1), true},
		{apierrors.NewServiceUnavailable("restarting"), true},
		{apierrors.NewTimeoutError("slow", 1), true},
		{apierrors.NewInternalError(errors.New("kubelet failed")), false},
		{apierrors.NewNotFound(gr, "x"), false},
		{apierrors.NewForbidden(gr, "x", errors.New("no")), false},
		{errors.New(`no logs found for container "c"`), false},
	} {
		if got := Is(tc.err); got != tc.want {
			t.Errorf("Is(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestBackoffIsCappedWithJitter(t *testing.T) {
	b := Backoff(100*time.Millisecond, time.Second)
	seen := map[time.Duration]bool{}
	for i := 0; i < 50; i++ {
		d := b.Step()
		if d > 1500*time.Millisecond {
			t.Fatalf("step %d: %s, above the cap plus jitter", i, d)
		}
		if i >= 10 {
			if d < time.Second {
				t.Fatalf("step %d: %s, want the cap (1s) or more with jitter", i, d)
			}
			seen[d] = true
		}
	}
	// Streams dropped together must not all retry at the same instant.
	if len(seen) < 10 {
		t.Fatalf("capped pauses %v: want them spread by jitter", seen)
	}
}

// QuietContext's logger says nothing at the default verbosity, not even errors or warnings.
func TestQuietContext(t *testing.T) {
	var out bytes.Buffer
	klog.LogToStderr(false)
	klog.SetOutput(&out)
	defer klog.LogToStderr(true)
	l := klog.FromContext(QuietContext(context.Background()))
	l.Info("Warning: watch ended with error")
	l.Error(errRefused, "Failed to watch")
	l.WithName("reflector").WithValues("type", "Job").Error(errRefused, "Failed to list")
	klog.Flush()
	if out.Len() != 0 {
		t.Fatalf("printed at the default verbosity:\n%s", out.String())
	}
}

// The API server's answer when a pod's kubelet cannot serve its log is the kubelet's outage,
// not the API server's, and not a failure of the request itself.
func TestIsKubelet(t *testing.T) {
	kubeletDown := apierrors.NewInternalError(errors.New(`Get "https://10.0.0.5:10250/containerLogs/ml/train-0-x/tao?follow=true": dial tcp 10.0.0.5:10250: connect: connection refused`))
	for _, tc := range []struct {
		name          string
		err           error
		kubelet, apis bool
	}{
		{"kubelet refused", kubeletDown, true, false},
		{"kubelet reset", apierrors.NewInternalError(errors.New(`Get "https://n:10250/containerLogs/a/b/c": read tcp: connection reset by peer`)), true, false},
		{"other 500", apierrors.NewInternalError(errors.New("etcdserver: request timed out")), false, false},
		{"a 500 about the log itself", apierrors.NewInternalError(errors.New(`Get "https://n:10250/containerLogs/a/b/c": no such container`)), false, false},
		{"API server refused", errRefused, false, true},
		{"nil", nil, false, false},
	} {
		if got := IsKubelet(tc.err); got != tc.kubelet {
			t.Errorf("%s: IsKubelet = %v, want %v", tc.name, got, tc.kubelet)
		}
		if got := Is(tc.err); got != tc.apis {
			t.Errorf("%s: Is = %v, want %v", tc.name, got, tc.apis)
		}
	}
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 1, 18, 40, 12, 0, time.Local))
	var out bytes.Buffer
	r := NewKubelet(&out, "following job.batch/train", "gpu-node-3", clk)
	if r.Failed(errRefused) {
		t.Fatal("the kubelet's reporter took the API server's outage")
	}
	for i := 0; i < 10; i++ { // 8 ranks on the node, retrying for 10 s
		for s := 0; s < 8; s++ {
			r.Failed(kubeletDown)
		}
		clk.SetTime(clk.Now().Add(time.Second))
	}
	r.OK()
	want := "following job.batch/train: the kubelet of node gpu-node-3 is unreachable since 18:40:12 (" + kubeletDown.Error() + "); retrying\n" +
		"following job.batch/train: the kubelet of node gpu-node-3 answers again (unreachable for 10s)\n"
	if out.String() != want {
		t.Fatalf("stderr:\n%s\nwant:\n%s", out.String(), want)
	}
}

// recordingSink is a shared sink, like klog's global one: it counts Init calls and records
// every message's level and whether it carried the error.
type recordingSink struct {
	mu    sync.Mutex
	inits int
	msgs  []recorded
}

type recorded struct {
	level  int
	msg    string
	hasErr bool
}

func (s *recordingSink) Init(logr.RuntimeInfo) { s.mu.Lock(); s.inits++; s.mu.Unlock() }
func (s *recordingSink) Enabled(int) bool      { return true }
func (s *recordingSink) Info(level int, msg string, kv ...any) {
	hasErr := false
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "err" && kv[i+1] == errRefused {
			hasErr = true
		}
	}
	s.mu.Lock()
	s.msgs = append(s.msgs, recorded{level, msg, hasErr})
	s.mu.Unlock()
}
func (s *recordingSink) Error(err error, msg string, kv ...any) {
	s.mu.Lock()
	s.msgs = append(s.msgs, recorded{-1, msg, err != nil})
	s.mu.Unlock()
}
func (s *recordingSink) WithValues(...any) logr.LogSink { return s }
func (s *recordingSink) WithName(string) logr.LogSink   { return s }

// QuietContext may be called from many goroutines at once on one shared sink while their
// loggers log: it must not re-initialise the shared sink (logr.New calling Init wrote its call
// depth while another goroutine's logger read it), and every message must still arrive demoted.
// Run with -race (make race) it also proves the calls do not race.
func TestQuietContextConcurrent(t *testing.T) {
	sink := &recordingSink{}
	ctx := klog.NewContext(context.Background(), logr.New(sink))
	initsBefore := sink.inits
	const goroutines, perGoroutine = 8, 100
	var wg sync.WaitGroup
	for i := 0; i < goroutines; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < perGoroutine; j++ {
				l := klog.FromContext(QuietContext(ctx))
				l.V(1).Info("quiet info")
				l.Error(errRefused, "quiet error")
			}
		}()
	}
	wg.Wait()
	if sink.inits != initsBefore {
		t.Errorf("the shared sink was initialised %d more times by QuietContext", sink.inits-initsBefore)
	}
	if want := 2 * goroutines * perGoroutine; len(sink.msgs) != want {
		t.Fatalf("%d messages reached the sink, want %d", len(sink.msgs), want)
	}
	for _, m := range sink.msgs {
		switch m.msg {
		case "quiet info":
			if m.level != 1+DetailLevel {
				t.Fatalf("an info at V(1) reached the sink at level %d, want %d", m.level, 1+DetailLevel)
			}
		case "quiet error":
			if m.level != DetailLevel || !m.hasErr {
				t.Fatalf("an error reached the sink as %+v, want an info at level %d carrying the error", m, DetailLevel)
			}
		default:
			t.Fatalf("unexpected message %+v", m)
		}
	}
}
