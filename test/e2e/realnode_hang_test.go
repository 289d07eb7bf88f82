//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
)

// TestRealNodeHang proves --hang-timeout and `stacks` with real processes on the real node:
// Debian's torch under torchrun over gloo, the supervisor in every rank.
func TestRealNodeHang(t *testing.T) {
	rig := newTorchRig(t)
	n, ns, srv := rig.n, rig.ns, rig.srv
	file := scriptFile(t, "ckpt.py", checkpointScript)

	// Rank 1 stops before an all-reduce and sleeps while rank 0 blocks in it. Within the
	// timeout (and a minute for the new pods) both ranks are in attempt 2, which resumes after
	// the last checkpoint and completes; attempt 1's logs hold each rank's stack where it hung,
	// and diagnose names the hang.
	t.Run("hung-rank", func(t *testing.T) {
		t.Parallel()
		job := "hang"
		const timeout = 30 * time.Second
		submitRealEnv(t, srv.Env("results"), n, ns, job, rig.flags(file, 2, "--retries", "2", "--hang-timeout", timeout.String(),
			"--env", "STEPS=16", "--env", "HANG_AT=7", "--env", "STEP_DELAY=0.3"), torchrunEach(2, "/opt/scripts/ckpt.py"))
		follow := taoBackground(t, "logs", "-f", job, "-n", ns)
		follow.waitOutput(t, 3*time.Minute, "rank 1 attempt 1 hangs at step 7\n")
		hungAt := time.Now()
		follow.waitOutput(t, timeout+2*time.Minute, "rank 0 attempt 2 resumed at step 5", "rank 1 attempt 2 resumed at step 5")
		// The resume lines follow the restore; both ranks were replaced by then.
		if took := time.Since(hungAt); took > timeout+time.Minute+10*time.Second {
			t.Errorf("both ranks were in attempt 2 %s after the hang, want within the timeout and a minute", took.Round(time.Second))
		}
		waitComplete(t, ns, job)
		stepsRunOnce(t, jobLogs(t, ns, job), 2, 2, 5, 16)
		// Attempt 1 of each rank: the hang said, and the stacks where each process was.
		for rank, frame := range map[int]string{1: `File "/opt/scripts/ckpt.py", line \d+ in <module>`, 0: `line \d+ in all_reduce`} {
			r := tao(t, nil, "logs", job, "-n", ns, "--rank", fmt.Sprint(rank), "--attempt", "1")
			if r.code != 0 {
				t.Fatalf("logs --attempt 1 of rank %d: %s", rank, r)
			}
			if !strings.Contains(r.stdout, "kubectl-tao: hang: no rank has printed a line, written a checkpoint file or kept a GPU busy for 30s") ||
				!strings.Contains(r.stdout, "then ending it (exit 204)") ||
				!strings.Contains(r.stdout, "by faulthandler ---") || !regexp.MustCompile(frame).MatchString(r.stdout) {
				t.Errorf("rank %d attempt 1's log lacks the hang, its stacks or the frame %q:\n%s", rank, frame, r.stdout)
			}
		}
		// The job completed: diagnose names each hung attempt in a note, with the rank first
		// silent and the innermost frames from the termination message.
		r := tao(t, nil, "diagnose", job, "-n", ns, "-o", "json")
		var d struct {
			Status string   `json:"status"`
			Notes  []string `json:"notes"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
			t.Fatalf("diagnose -o json: %v\n%s", err, r)
		}
		hangs := 0
		for _, n := range d.Notes {
			if strings.Contains(n, ": Hang: exit code 204") && strings.Contains(n, "went silent first") && strings.Contains(n, "innermost frames") {
				hangs++
			}
		}
		if d.Status != "Complete" || hangs != 2 {
			t.Errorf("diagnose names %d hung attempts, want both ranks' attempt 1:\n%s", hangs, r.stdout)
		}
	})

	// `stacks` of a running 2-rank job shows both ranks' frames, and the job trains on: every
	// step after it runs once.
	t.Run("stacks", func(t *testing.T) {
		t.Parallel()
		job := "stacks"
		submitRealEnv(t, srv.Env("results"), n, ns, job, rig.flags(file, 2, "--env", "STEPS=40", "--env", "STEP_DELAY=0.3"),
			torchrunEach(2, "/opt/scripts/ckpt.py"))
		follow := taoBackground(t, "logs", "-f", job, "-n", ns)
		follow.waitOutput(t, 3*time.Minute, "rank 0 attempt 1 step 3\n", "rank 1 attempt 1 step 3\n")
		r := tao(t, nil, "stacks", job, "-n", ns)
		if r.code != 0 {
			t.Fatalf("stacks: %s", r)
		}
		for rank := range 2 {
			prefix := fmt.Sprintf("[rank %d] ", rank)
			// torchrun's agent and its worker, each a Python process with its threads.
			if !strings.Contains(r.stdout, prefix+"--- process ") || !strings.Contains(r.stdout, "torchrun") ||
				!regexp.MustCompile(regexp.QuoteMeta(prefix)+`\s+File "/opt/scripts/ckpt.py", line \d+ in <module>`).MatchString(r.stdout) {
				t.Errorf("rank %d's stacks lack the training script's frame or torchrun:\n%s", rank, r.stdout)
			}
		}
		waitComplete(t, ns, job)
		stepsRunOnce(t, jobLogs(t, ns, job), 2, 1, 0, 40)
		// A finished job's ranks have no stacks to give: said, as logs says a gone pod.
		if r := tao(t, nil, "stacks", job, "-n", ns, "--rank", "0"); r.code == 0 || !strings.Contains(r.stderr, "not running") {
			t.Errorf("stacks of a finished rank: %s", r)
		}
	})
}

// A job that computes for longer than the timeout without printing, while its GPU reads busy,
// is not a hang: it completes. Its 80 s of silence outlast the start's allowance (twice the
// timeout) and the timeout. The test image has the nvidia-smi stand-in and no Python.
func TestRealNodeHangBusyGPU(t *testing.T) {
	n := stagerNode(t)
	t.Parallel()
	ns := namespace(t)
	job := "busy"
	submitReal(t, n, ns, job, []string{"--gpus", "1", "--shm-size", "0", "--stager-image", n.StagerImage, "--hang-timeout", "30s"},
		`printf 'util=90\nmem_used_mib=1000\n' > /tmp/nvidia-smi-stand-in; echo computing; sleep 80; echo done`)
	if err := pollErr(3*time.Minute, jobFinished(ns, job, batchv1.JobComplete)); err != nil {
		t.Fatalf("job %s did not complete: %v\nlogs:\n%s\ndiagnose:\n%s", job, err, tao(t, nil, "logs", job, "-n", ns), tao(t, nil, "diagnose", job, "-n", ns))
	}
	if r := tao(t, nil, "logs", job, "-n", ns); strings.Contains(r.stdout, "hang") || !strings.Contains(r.stdout, "done") {
		t.Errorf("logs:\n%s", r.stdout)
	}
}

// stepsRunOnce checks that each of ranks ran steps from to to-1 of attempt exactly once, in
// checkpointScript's lines under torchrun.
func stepsRunOnce(t *testing.T, logs map[int][]string, ranks, attempt, from, to int) {
	t.Helper()
	rx := regexp.MustCompile(fmt.Sprintf(`^\[default0\]:rank \d attempt %d step (\d+)$`, attempt))
	for rank := range ranks {
		seen := map[string]int{}
		for _, l := range logs[rank] {
			if m := rx.FindStringSubmatch(l); m != nil {
				seen[m[1]]++
			}
		}
		for step := from; step < to; step++ {
			if seen[fmt.Sprint(step)] != 1 {
				t.Errorf("rank %d attempt %d ran step %d %d times, want once", rank, attempt, step, seen[fmt.Sprint(step)])
			}
		}
	}
}

// The supervisor needs no shell of the image: an argv runs under it in an image that has only
// /bin/sh (no bash, which the staging wrapper it replaced needed).
func TestRealNodeSupervisorWithoutBash(t *testing.T) {
	n := stagerNode(t)
	if n.ShOnlyImage == "" {
		t.Fatal("the real node has no sh-only image")
	}
	t.Parallel()
	ns := namespace(t)
	submitReal(t, n, ns, "nobash", []string{"--image", n.ShOnlyImage, "--stager-image", n.StagerImage, "--hang-timeout", "30s"},
		"/bin/sh", "-c", `echo "supervised on $TAO_NODE_NAME"`)
	waitComplete(t, ns, "nobash")
	if r := tao(t, nil, "logs", "nobash", "-n", ns); !strings.Contains(r.stdout, "supervised on "+n.Name) {
		t.Errorf("logs: %s", r)
	}
}
