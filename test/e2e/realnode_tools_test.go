//go:build e2e

package e2e

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestRealNodeLogsFollowEnds follows a 2-rank job from its submission: the follow ends by itself
// once the containers have exited, with every line of both ranks, and exits 0.
func TestRealNodeLogsFollowEnds(t *testing.T) {
	n := realNode(t)
	t.Parallel()
	ns := namespace(t)
	submitReal(t, n, ns, "short", []string{"--nodes", "2", "--shm-size", "64Mi"}, trainerPath, "--steps", "4", "--step-delay", "300ms")
	follow := taoBackground(t, "logs", "-f", "short", "-n", ns)
	r := follow.wait(t, 2*time.Minute)
	if r.code != 0 {
		t.Fatalf("logs -f: %s", r)
	}
	logs := rankLogs(t, r.stdout)
	for rank := range 2 {
		for _, want := range []string{"step 4", "done, exit code 0"} {
			if !hasLine(logs[rank], rank, want) {
				t.Errorf("rank %d: no %q in the followed log: %s", rank, want, r)
			}
		}
	}
}

// TestRealNodeLogsOfASilentContainer reads the log of a running container that has printed
// nothing: a kubelet answers with an empty log, and logs prints nothing and succeeds.
func TestRealNodeLogsOfASilentContainer(t *testing.T) {
	n := realNode(t)
	t.Parallel()
	ns := namespace(t)
	submitReal(t, n, ns, "silent", nil, "sleep", "600")
	rankPod(t, ns, "silent", 0, corev1.PodRunning)
	r := tao(t, nil, "logs", "silent", "-n", ns)
	if r.code != 0 || r.stdout != "" {
		t.Errorf("logs of a silent running container: want exit 0 and no output, got %s", r)
	}
	// sleep has no SIGTERM handler: no need to sit out a grace period.
	contains(t, tao(t, nil, "cancel", "silent", "-n", ns, "--grace-period", "1", "--timeout", "60s"), 0)
}

// TestRealNodeExecAndPortForward runs commands in rank 1 of a live job and reaches rank 1's
// HTTP server through port-forward.
func TestRealNodeExecAndPortForward(t *testing.T) {
	n := realNode(t)
	t.Parallel()
	ns := namespace(t)
	submitReal(t, n, ns, "live", []string{"--nodes", "2", "--shm-size", "64Mi"},
		trainerPath, "--steps", "1", "--hold", "10m", "--http", "8080")
	poll(t, 2*time.Minute, "both ranks to hold", func(context.Context) (bool, error) {
		r := tao(t, nil, "logs", "live", "-n", ns)
		return strings.Contains(r.stdout, "[rank 0] rank 0 holding") && strings.Contains(r.stdout, "[rank 1] rank 1 holding"), nil
	})

	// exec lands in rank 1's container, next to the trainer the wrapper started there.
	r := tao(t, nil, "exec", "live", "-n", ns, "--rank", "1", "--", "bash", "-c",
		`echo "$JOB_COMPLETION_INDEX $(hostname)"; for p in /proc/[0-9]*; do tr '\0' ' ' 2>/dev/null <$p/cmdline; echo; done | grep '^/bin/trainer '`)
	if want := "1 live-1\n" + trainerPath + " --steps 1 --hold 10m --http 8080 \n"; r.code != 0 || r.stdout != want {
		t.Errorf("exec in rank 1: want %q, got %s", want, r)
	}
	// The real kubelet reports the remote command's exit status, and exec exits with it.
	if r := tao(t, nil, "exec", "live", "-n", ns, "--rank", "1", "--", "sh", "-c", "exit 7"); r.code != 7 {
		t.Errorf("exec of `exit 7`: want exit 7, got %s", r)
	}

	pf := taoBackground(t, "port-forward", "live", "-n", ns, "--rank", "1", ":8080")
	pf.waitOutput(t, 30*time.Second, " -> 8080")
	m := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`).FindStringSubmatch(pf.out.String())
	if m == nil {
		t.Fatalf("port-forward printed %q", pf.out.String())
	}
	resp, err := http.Get("http://127.0.0.1:" + m[1] + "/")
	if err != nil {
		t.Fatalf("through the forward: %v; stderr %s", err, pf.errOut.String())
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "trainer rank 1 step 1\n" {
		t.Errorf("through the forward: %q", body)
	}
	_ = pf.cmd.Process.Signal(syscall.SIGINT)
	if r := pf.wait(t, 30*time.Second); r.code != 0 {
		t.Errorf("port-forward after Ctrl-C: %s", r)
	}
	contains(t, tao(t, nil, "cancel", "live", "-n", ns, "--timeout", "60s"), 0)
}

// TestRealNodePodEnvironment checks what a rank finds in its pod: the --file at its path,
// a memory-backed /dev/shm of the size asked, and the device plugin's NVIDIA_VISIBLE_DEVICES.
func TestRealNodePodEnvironment(t *testing.T) {
	n := realNode(t)
	t.Parallel()
	ns := namespace(t)
	spec := "model: resnet18\nlr: 0.1 # üñí $(HOME) $$ `id`\n\ttab\n"
	local := filepath.Join(t.TempDir(), "train.yaml")
	if err := os.WriteFile(local, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	const path = "/etc/tao/specs/train.yaml"
	submitReal(t, n, ns, "env", []string{"--gpus", "2", "--shm-size", "96Mi", "--file", local + ":" + path},
		trainerPath, "--spec", path, "--steps", "0")
	waitComplete(t, ns, "env")
	lines := jobLogs(t, ns, "env")[0]

	var got struct {
		Path, Hex string
	}
	trainerJSON(t, lines, 0, "spec", &got)
	if b, _ := hex.DecodeString(got.Hex); got.Path != path || string(b) != spec {
		t.Errorf("spec file at %s = %q, want %q", got.Path, b, spec)
	}
	var info trainerInfo
	trainerJSON(t, lines, 0, "info", &info)
	if info.Shm == nil || !info.Shm.Tmpfs || info.Shm.Bytes != 96<<20 {
		t.Errorf("/dev/shm = %+v, want a 96Mi tmpfs", info.Shm)
	}
	if info.NvidiaVisibleDevs == nil {
		t.Fatalf("NVIDIA_VISIBLE_DEVICES not set in a rank with 2 GPUs: %+v", info)
	}
	ids := strings.Split(*info.NvidiaVisibleDevs, ",")
	if len(ids) != 2 || ids[0] == "" || ids[1] == "" || ids[0] == ids[1] {
		t.Errorf("NVIDIA_VISIBLE_DEVICES = %q, want 2 distinct devices", *info.NvidiaVisibleDevs)
	}
}

// TestRealNodeLogsOfARetriedRank fails a rank twice under --retries 1: restartPolicy is Never, so
// each attempt is a pod of its own, and logs reads both, the replaced one first.
func TestRealNodeLogsOfARetriedRank(t *testing.T) {
	n := realNode(t)
	t.Parallel()
	ns := namespace(t)
	submitReal(t, n, ns, "retried", []string{"--retries", "1"}, trainerPath, "--steps", "1", "--exit", "1")
	if err := pollErr(3*time.Minute, jobFinished(ns, "retried", batchv1.JobFailed)); err != nil {
		t.Fatalf("job retried: %v", err)
	}
	r := tao(t, nil, "logs", "retried", "-n", ns)
	lines := rankLogs(t, r.stdout)[0]
	var infos int
	for _, l := range lines {
		if strings.HasPrefix(l, "rank 0 info ") {
			infos++
		}
	}
	if done := strings.Count(r.stdout, "[rank 0] rank 0 done, exit code 1\n"); r.code != 0 || infos != 2 || done != 2 {
		t.Fatalf("logs of a rank tried twice: want both attempts (2 info and 2 done lines), got %s", r)
	}
}
