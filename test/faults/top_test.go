//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubectl-tao/kubectl-tao/test/localcluster"
)

// TestTopWatchOutage runs `top -w` on a 4-rank job while the API server is stopped for 30 s:
// top goes on, says the outage in a few stderr lines, shows no reading taken during it and
// reads again after it, and ends with 0 when interrupted.
func TestTopWatchOutage(t *testing.T) {
	const ranks = 4
	runFor := 150 * time.Second
	ns := namespace(t)
	if r := tao(t, kubeconfig, submit(ns, "watched", ranks, int(runFor/time.Second), time.Second, runFor)...); r.code != 0 {
		t.Fatalf("submit: %s", r)
	}
	follow := start(t, kubeconfig, "logs", "-f", "watched", "-n", ns)
	firstLines(t, 3*time.Minute, ns, follow, ranks)
	top := start(t, kubeconfig, "top", "watched", "-n", ns, "-w", "--interval", "1s", "-o", "json")
	poll(t, time.Minute, "top's first readings", func(context.Context) (bool, error) { return len(readings(t, top)) >= 2, nil })

	controlAPIServer(t, localcluster.ActionStop)
	stopped := time.Now()
	time.Sleep(30 * time.Second) // the outage itself: its length is the point
	// The API server may answer before the start returns: the outage ends when the start begins.
	starting := time.Now()
	controlAPIServer(t, localcluster.ActionStart)
	started := time.Now()
	poll(t, 2*time.Minute, "top's readings after the outage", func(context.Context) (bool, error) {
		n := 0
		for _, at := range readings(t, top) {
			if at.After(started) {
				n++
			}
		}
		return n >= 3, nil
	})
	if err := top.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := top.finish(t, 30*time.Second); code != 0 {
		t.Errorf("%s", top)
	}
	for _, at := range readings(t, top) {
		// A reading begun just before the stop may end just after it; none is taken in the outage.
		if at.After(stopped.Add(outageGrace)) && at.Before(starting) {
			t.Errorf("a reading at %s, in the outage (%s to %s)", at.Format(time.RFC3339), stopped.Format(time.RFC3339), starting.Format(time.RFC3339))
		}
	}
	said := outageLines(t, top, nil)
	t.Logf("%s: %d outage lines:\n%s", top.name, len(said), strings.Join(said, "\n"))
	if len(said) < 2 || len(said) > 4 || !strings.Contains(said[0], "is unreachable since") || !strings.Contains(said[len(said)-1], "answers again") {
		t.Errorf("%s said the outage in %d lines, want the line when it went and the line when it was back (at most 4):\n%s", top.name, len(said), strings.Join(said, "\n"))
	}
}

// outageGrace is how long a reading begun before the API server stopped may take to finish.
const outageGrace = 5 * time.Second

// readings are the times of the JSON documents top -w printed so far (the last one may be
// half-written).
func readings(t *testing.T, r *run) []time.Time {
	t.Helper()
	var out []time.Time
	dec := json.NewDecoder(strings.NewReader(r.out.String()))
	for {
		var doc struct {
			Time time.Time `json:"time"`
		}
		if err := dec.Decode(&doc); err != nil {
			return out
		}
		out = append(out, doc.Time)
	}
}
