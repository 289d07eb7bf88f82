//go:build e2e

package e2e

import (
	"strings"
	"testing"
)

// saidOnce checks that stderr holds exactly one "cannot start" line, for rank 0 of the one-node
// job, with one of issues in it and the diagnose command at its end.
func saidOnce(t *testing.T, r result, ns, job string, issues ...string) {
	t.Helper()
	var said []string
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.Contains(l, "cannot start") {
			said = append(said, l)
		}
	}
	named := false
	for _, issue := range issues {
		named = named || len(said) == 1 && strings.Contains(said[0], "cannot start: "+issue)
	}
	if len(said) != 1 || !named || !strings.HasPrefix(said[0], "rank 0 (pod "+job+"-") ||
		!strings.HasSuffix(said[0], "; see why: kubectl tao diagnose "+job+" -n "+ns) {
		t.Errorf("want one line naming one of %q and diagnose, got %q\n%s", issues, said, r)
	}
}

// TestStuckUnschedulable: a rank no node can take (a node selector no node matches) is said
// once on stderr, with the command that explains it, by wait, logs -f, submit --wait and submit
// --follow; after --stuck-timeout each exits with 12 and prints nothing on stdout (submit --wait
// only what it created).
func TestStuckUnschedulable(t *testing.T) {
	ns := namespace(t)
	submit(t, ns, "nowhere", "--gpus", "1", "--node-selector", "foo=bar", "--no-capacity-check", "--", "true")
	once := func(t *testing.T, r result, job string) {
		t.Helper()
		saidOnce(t, r, ns, job, "NoMatchingNode: no node matches the node selector foo=bar")
	}
	t.Run("wait", func(t *testing.T) {
		r := tao(t, nil, "wait", "nowhere", "-n", ns, "--stuck-timeout", "5s")
		contains(t, r, 12, "error: job.batch/nowhere could not start for 5s (--stuck-timeout): NoMatchingNode")
		if r.stdout != "" {
			t.Errorf("stdout = %q, want nothing", r.stdout)
		}
		once(t, r, "nowhere")
	})
	t.Run("logs -f", func(t *testing.T) {
		r := tao(t, nil, "logs", "-f", "nowhere", "-n", ns, "--stuck-timeout", "5s")
		contains(t, r, 12, "could not start for 5s (--stuck-timeout)")
		if r.stdout != "" {
			t.Errorf("stdout = %q, want nothing", r.stdout)
		}
		once(t, r, "nowhere")
	})
	t.Run("submit --wait", func(t *testing.T) {
		r := tao(t, nil, "submit", "-n", ns, "--image", "nvcr.io/nvidia/pytorch:25.01-py3", "nowhere2", "--gpus", "1",
			"--node-selector", "foo=bar", "--no-capacity-check", "--wait", "--stuck-timeout", "5s", "--", "true")
		contains(t, r, 12, "job.batch/nowhere2 created", "could not start for 5s (--stuck-timeout)")
		once(t, r, "nowhere2")
	})
	t.Run("submit --follow", func(t *testing.T) {
		r := tao(t, nil, "submit", "-n", ns, "--image", "nvcr.io/nvidia/pytorch:25.01-py3", "nowhere3", "--gpus", "1",
			"--node-selector", "foo=bar", "--no-capacity-check", "--follow", "--stuck-timeout", "5s", "--", "true")
		contains(t, r, 12, "could not start for 5s (--stuck-timeout)")
		if r.stdout != "" {
			t.Errorf("stdout = %q, want nothing (--follow names what it created on stderr)", r.stdout)
		}
		once(t, r, "nowhere3")
	})
}

// TestStuckImagePull: the simulated kubelet's image pull back-off (KWOK pulls no images; the
// fate annotation makes the pod look as a real kubelet leaves it, flipping between ErrImagePull
// and ImagePullBackOff) is said once by wait, which gives up after --stuck-timeout with 12.
func TestStuckImagePull(t *testing.T) {
	ns := namespace(t)
	submit(t, ns, "img", "--gpus", "1", "--annotation", "sim.kubectl-tao.dev/fate=image-pull-backoff", "--", "true")
	r := tao(t, nil, "wait", "img", "-n", ns, "--stuck-timeout", "5s")
	contains(t, r, 12, "could not start for 5s (--stuck-timeout): ")
	if r.stdout != "" {
		t.Errorf("stdout = %q, want nothing", r.stdout)
	}
	saidOnce(t, r, ns, "img", "ImagePullBackOff: ", "ErrImagePull: ")
	// 0 waits forever: only --timeout ends this wait, and the issue is said all the same.
	r = tao(t, nil, "wait", "img", "-n", ns, "--stuck-timeout", "0", "--timeout", "8s")
	contains(t, r, 8, "timed out after 8s")
	saidOnce(t, r, ns, "img", "ImagePullBackOff: ", "ErrImagePull: ")
}
