package mpiagent

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakePods are the agents of a job's pods: each host answers once it is up (after its number
// of failed dials), with its key.
type fakePods struct {
	mu       sync.Mutex
	failures map[string]int
	keys     map[string][]byte
	// done counts the Done requests each host's agent took.
	done map[string]int
}

func (p *fakePods) dial(_ context.Context, host string) (net.Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n, ok := p.failures[host]; !ok || n > 0 {
		if ok {
			p.failures[host] = n - 1
		}
		return nil, errors.New("dial tcp " + host + ":29502: connect: connection refused")
	}
	client, server := net.Pipe()
	s := &Server{Key: p.keys[host], Exec: func(context.Context, Request, io.Writer, io.Writer) (int, error) { return 0, nil },
		Done: func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.done[host]++
		}}
	go s.ServeConn(context.Background(), server)
	return client, nil
}

func TestWaitReachable(t *testing.T) {
	hosts := []string{"j-0.j", "j-1.j", "j-2.j", "j-10.j"}
	keys := map[string][]byte{}
	for _, h := range hosts {
		keys[h] = jobKey
	}
	for _, tc := range []struct {
		name     string
		failures map[string]int
		keys     map[string][]byte
		want     string
		// refusedKey: the wait must end at once.
		refusedKey bool
	}{
		{name: "every agent up", failures: map[string]int{"j-0.j": 0, "j-1.j": 0, "j-2.j": 0, "j-10.j": 0}},
		{name: "agents that come up late", failures: map[string]int{"j-0.j": 0, "j-1.j": 3, "j-2.j": 1, "j-10.j": 5}},
		{name: "agents that never come up", failures: map[string]int{"j-0.j": 0, "j-2.j": 1},
			want: "the MPI agent of 2 of the job's pods never answered: j-1.j (dial tcp j-1.j:29502: connect: connection refused); j-10.j (dial tcp j-10.j:29502: connect: connection refused)"},
		{name: "an agent of another key", failures: map[string]int{"j-0.j": 0, "j-1.j": 0, "j-2.j": 0, "j-10.j": 0},
			keys: map[string][]byte{"j-0.j": jobKey, "j-1.j": jobKey, "j-2.j": otherKey, "j-10.j": jobKey},
			want: "j-2.j: the MPI agent refused the connection: wrong key", refusedKey: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods := &fakePods{failures: tc.failures, keys: keys}
			if tc.keys != nil {
				pods.keys = tc.keys
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			start := time.Now()
			err := WaitReachable(ctx, pods.dial, jobKey, hosts, time.Millisecond)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("WaitReachable = %v, want nil", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Fatalf("WaitReachable = %v,\nwant %s", err, tc.want)
			}
			var unreachable *UnreachableError
			if errors.As(err, &unreachable) != strings.Contains(tc.want, "never answered") {
				t.Errorf("error %T: want an *UnreachableError exactly when agents never answered", err)
			}
			if tc.refusedKey && time.Since(start) > time.Second {
				t.Errorf("a refused key took %s: want the wait ended at once", time.Since(start))
			}
		})
	}
}

// Finish tells every agent it can reach, and names those it could not tell.
func TestFinish(t *testing.T) {
	pods := &fakePods{failures: map[string]int{"j-1.j": 0, "j-3.j": 0}, done: map[string]int{},
		keys: map[string][]byte{"j-1.j": jobKey, "j-2.j": jobKey, "j-3.j": otherKey}}
	err := Finish(context.Background(), pods.dial, jobKey, []string{"j-1.j", "j-2.j", "j-3.j"})
	want := "j-2.j: dial tcp j-2.j:29502: connect: connection refused\nj-3.j: the MPI agent refused the connection: wrong key"
	if err == nil || err.Error() != want {
		t.Errorf("Finish = %v, want\n%s", err, want)
	}
	if len(pods.done) != 1 || pods.done["j-1.j"] != 1 {
		t.Errorf("the agents told: %v, want j-1.j once", pods.done)
	}
	if err := Finish(context.Background(), pods.dial, jobKey, nil); err != nil {
		t.Errorf("no hosts: %v", err)
	}
}

// WaitGone returns once no agent answers any more, and names those still answering when its
// time runs out.
func TestWaitGone(t *testing.T) {
	var mu sync.Mutex
	answers := map[string]int{"j-1.j": 0, "j-2.j": 3}
	dial := func(_ context.Context, host string) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		if answers[host] == 0 {
			return nil, errors.New("connection refused")
		}
		answers[host]--
		client, server := net.Pipe()
		go (&Server{Key: jobKey}).ServeConn(context.Background(), server)
		return client, nil
	}
	if err := WaitGone(context.Background(), dial, jobKey, []string{"j-1.j", "j-2.j"}, time.Millisecond); err != nil {
		t.Errorf("WaitGone = %v", err)
	}
	answers["j-2.j"] = 1 << 30
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := WaitGone(ctx, dial, jobKey, []string{"j-1.j", "j-2.j"}, time.Millisecond); err == nil || err.Error() != "still answering: j-2.j" {
		t.Errorf("WaitGone = %v, want j-2.j still answering", err)
	}
}
