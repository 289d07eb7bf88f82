//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/test/s3server"
)

// checkpointScript trains STEPS steps of an all-reduce over gloo, saving {"step": n} with
// torch.save on rank 0 every 5 steps, and resumes after the checkpoint it is told of. With
// PARTIAL_AT set, the first attempt writes half of that step's checkpoint and dies (exit 1), as
// a writer killed while it saves would; with SAVE_ON_TERM=1, a SIGTERM to any rank stops every
// rank at the same step, rank 0 saving the last step done, as a training loop that handles a
// preemption does; with HANG_AT set, rank 1 of the first attempt stops before that step's
// all-reduce and sleeps for ever, while rank 0 blocks in it: a hung job.
const checkpointScript = `import io, os, sys, time
import torch
import torch.distributed as dist

def say(line):
    sys.stdout.write(line + "\n")  # one write per line: torchrunCommand says why
    sys.stdout.flush()

dist.init_process_group("gloo")
rank = dist.get_rank()
ckpt, resume, attempt = os.environ["TAO_CHECKPOINT_DIR"], os.environ.get("TAO_RESUME_CHECKPOINT", ""), os.environ["TAO_ATTEMPT"]
start = 0
if resume:
    start = torch.load(resume)["step"] + 1
    say(f"rank {rank} attempt {attempt} resumed at step {start} from {os.path.basename(resume)}")
else:
    say(f"rank {rank} attempt {attempt} started at step 0")
partial = int(os.environ.get("PARTIAL_AT", "-1"))
hang = int(os.environ.get("HANG_AT", "-1"))
done = start - 1
save_on_term, stop = os.environ.get("SAVE_ON_TERM") == "1", False
if save_on_term:
    import signal
    def on_term(signum, frame):
        global stop
        stop = True
    signal.signal(signal.SIGTERM, on_term)
for step in range(start, int(os.environ["STEPS"])):
    if save_on_term:
        # Every rank learns of a SIGTERM (a preemption) at the same step, from one all-reduce of
        # the flag: a rank that left at once would break the collective its peers are in, and
        # rank 0 could die of it before it saved. Rank 0 keeps the last step done, then all leave.
        flag = torch.tensor([int(stop)])
        dist.all_reduce(flag)
        if flag.item():
            if rank == 0 and done >= 0:
                torch.save({"step": done}, f"{ckpt}/step-{done}.pt")
                # On stderr, which torchrun does not redirect: its tee of stdout stops with it.
                print(f"rank {rank} attempt {attempt} saved step {done} on SIGTERM", file=sys.stderr, flush=True)
            os._exit(0)
    if rank == 1 and step == hang and attempt == "1":
        say(f"rank {rank} attempt {attempt} hangs at step {step}")
        time.sleep(1e9)
    t = torch.tensor([1])
    dist.all_reduce(t)
    say(f"rank {rank} attempt {attempt} step {step}")
    if rank == 0 and step == partial and attempt == "1":
        buf = io.BytesIO()
        torch.save({"step": step}, buf)
        with open(f"{ckpt}/step-{step}.pt", "wb") as f:
            f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
            f.flush()
            say(f"rank {rank} dies while saving step {step}")
            os._exit(1)
    if rank == 0 and step % 5 == 4:
        torch.save({"step": step}, f"{ckpt}/step-{step}.pt")
    done = step
    time.sleep(float(os.environ.get("STEP_DELAY", "0.3")))
dist.destroy_process_group()
say(f"rank {rank} attempt {attempt} done")
`

// TestRealNodeCheckpoints proves --checkpoint-dir with real processes on the real node:
// Debian's torch under torchrun, the stager in every rank, the S3 test server. A retried rank,
// an evicted one, and a first attempt whose writer died mid-save all resume from the newest
// complete checkpoint, and every step after it runs once; wrong S3 keys fail the Job at once
// with exit 201, and diagnose names the staging, not the program.
func TestRealNodeCheckpoints(t *testing.T) {
	rig := newTorchRig(t)
	n, ns, srv := rig.n, rig.ns, rig.srv
	file := scriptFile(t, "ckpt.py", checkpointScript)
	const steps = 30
	flags := func(nodes int, extra ...string) []string {
		return rig.flags(file, nodes, append([]string{"--retries", "3", "--env", "STEPS=" + strconv.Itoa(steps)}, extra...)...)
	}
	command := func(nodes int) string { return torchrunEach(nodes, "/opt/scripts/ckpt.py") }

	t.Run("retried-rank", func(t *testing.T) {
		t.Parallel()
		job := "ckpt-kill"
		submitRealEnv(t, srv.Env("results"), n, ns, job, flags(2), command(2))
		follow := taoBackground(t, "logs", "-f", job, "-n", ns)
		follow.waitOutput(t, 3*time.Minute, "rank 1 attempt 1 step 12\n")
		// SIGKILL rank 1's training process (not torchrun): torchrun exits 1, rank 0 fails
		// on the lost peer, and both ranks are retried.
		kill := `import os
for p in os.listdir("/proc"):
    if p.isdigit() and int(p) != os.getpid():
        try:
            argv = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"ckpt.py") for a in argv) and not any(b"torchrun" in a for a in argv):
            os.kill(int(p), 9)
            print("killed", p)
`
		if r := tao(t, nil, "exec", job, "-n", ns, "--rank", "1", "--", "python3", "-c", kill); r.code != 0 || !strings.Contains(r.stdout, "killed") {
			t.Fatalf("killing rank 1's training process: %s", r)
		}
		follow.wait(t, 4*time.Minute)
		waitComplete(t, ns, job)
		checkResumed(t, ns, job, 2, steps)
	})

	t.Run("evicted-rank", func(t *testing.T) {
		t.Parallel()
		job := "ckpt-evict"
		submitRealEnv(t, srv.Env("results"), n, ns, job, flags(2, "--termination-grace-period", "60s"), command(2))
		follow := taoBackground(t, "logs", "-f", job, "-n", ns)
		follow.waitOutput(t, 3*time.Minute, "rank 0 attempt 1 step 12\n")
		pod := rankPods(t, ns, job)[0]
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns}}
		if err := client.PolicyV1().Evictions(ns).Evict(context.Background(), ev); err != nil {
			t.Fatalf("evicting rank 0's pod %s: %v", pod, err)
		}
		// The eviction marks the pod a DisruptionTarget before it stops it, so the pod failure
		// policy ignores its end: it costs no retry. The pod is deleted once it has ended.
		poll(t, 30*time.Second, "the evicted pod marked a DisruptionTarget", func(ctx context.Context) (bool, error) {
			p, err := client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue
			}), nil
		})
		follow.wait(t, 4*time.Minute)
		waitComplete(t, ns, job)
		checkResumed(t, ns, job, 2, steps)
	})

	t.Run("cut-short-checkpoint", func(t *testing.T) {
		t.Parallel()
		job := "ckpt-partial"
		submitRealEnv(t, srv.Env("results"), n, ns, job, flags(1, "--env", "PARTIAL_AT=7"), command(1))
		waitComplete(t, ns, job)
		// The first attempt kept step-4.pt, then died writing step-7.pt: the second resumes
		// from step 5, and the half file was never uploaded.
		resumed, _ := checkResumed(t, ns, job, 1, steps)
		if resumed[0] != 5 {
			t.Errorf("resumed at step %d, want 5 (after step-4.pt, the last complete checkpoint)", resumed[0])
		}
		contains(t, tao(t, nil, "logs", job, "-n", ns, "--attempt", "1"), 0, "rank 0 dies while saving step 7",
			"kubectl-tao: checkpoints: left out step-7.pt: a zip file (torch.save) without a readable central directory")
	})

	t.Run("wrong-keys", func(t *testing.T) {
		t.Parallel()
		job := "ckpt-denied"
		env := srv.Env("results")
		for i, kv := range env {
			if strings.HasPrefix(kv, s3layout.EnvSecretKey+"=") {
				env[i] = s3layout.EnvSecretKey + "=not-the-key"
			}
		}
		submitRealEnv(t, env, n, ns, job, []string{"--stager-image", n.StagerImage, "--checkpoint-dir", "/ckpt", "--retries", "2"}, trainerPath, "--steps", "1")
		if err := pollErr(3*time.Minute, jobFinished(ns, job, batchv1.JobFailed)); err != nil {
			t.Fatalf("a job whose checkpoints cannot be restored: %v\n%s", err, tao(t, nil, "logs", job, "-n", ns))
		}
		pods := jobPods(t, ns, job)
		if len(pods) != 1 {
			t.Errorf("%d pods: a failed restore was retried", len(pods))
		}
		contains(t, tao(t, nil, "logs", job, "-n", ns), 0, "checkpoint restore: listing s3://results/")
		contains(t, tao(t, nil, "diagnose", job, "-n", ns), 0, "StagingFailed", "exit code 201", "kept checkpoints were not downloaded")
	})
}

// torchRig is what the real-node checkpoint tests share: the node with the stager, its torch
// image, a namespace of the test's own, and an S3 server on the node's bridge with a bucket
// "results". The test runs in parallel from here on.
type torchRig struct {
	n     realNodeEnv
	image string
	ns    string
	srv   *s3server.Server
}

func newTorchRig(t *testing.T) torchRig {
	t.Helper()
	n := stagerNode(t)
	image := torchImage(t, n)
	t.Parallel()
	r := torchRig{n: n, image: image, ns: namespace(t), srv: s3server.StartOn(t, n.IP)}
	r.srv.MakeBucket(t, "results")
	return r
}

// flags are submit's flags for a job of the torch image on nodes pods, with the script file
// mounted and its checkpoints kept in /ckpt, then extra.
func (r torchRig) flags(file string, nodes int, extra ...string) []string {
	return append([]string{"--image", r.image, "--stager-image", r.n.StagerImage, "--nodes", strconv.Itoa(nodes), "--file", file,
		"--checkpoint-dir", "/ckpt"}, extra...)
}

// torchrunEach runs script under torchrun, one process per pod: standalone on one node, at the
// job's rendezvous otherwise.
func torchrunEach(nodes int, script string) string {
	if nodes == 1 {
		return "torchrun --standalone --nproc_per_node 1 --redirects 1 --tee 1 " + script
	}
	return strings.Replace(torchrunCommand, "--nproc_per_node 2", "--nproc_per_node 1", 1) + script
}

// preemptedCheckpointsResume runs on Kueue's real manager (TestQueue brings it up) and the real
// node: a low-priority 2-rank torch job with --checkpoint-dir is preempted by a high-priority one
// (a memory quota that holds one of them); its ranks get SIGTERM, rank 0 saves the step it was at
// and the wrapper uploads it within the grace period; no retry is spent (failed stays 0); once
// Kueue admits it again, every rank resumes right after that step and the job completes.
func preemptedCheckpointsResume(t *testing.T, dyn dynamic.Interface, ns string) {
	n := stagerNode(t)
	image := torchImage(t, n)
	ctx := context.Background()
	srv := s3server.StartOn(t, n.IP)
	srv.MakeBucket(t, "results")
	for name, value := range map[string]int64{"ckpt-low": 10, "ckpt-high": 1000} {
		createKueueObject(t, dyn, "workloadpriorityclasses", "", map[string]any{
			"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
			"metadata": map[string]any{"name": name}, "value": value,
		})
	}
	// Memory is the quota: 3Gi holds the 2 x 1536Mi low job or the high one, not both.
	createPreemptingClusterQueue(t, dyn, "ckpt-preempting", "3Gi", "0")
	createKueueObject(t, dyn, "localqueues", ns, map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
		"metadata": map[string]any{"name": "team-c", "namespace": ns},
		"spec":     map[string]any{"clusterQueue": "ckpt-preempting"},
	})
	t.Cleanup(func() {
		// Finished jobs keep their Workloads until they are deleted (cancel refuses them).
		for _, job := range []string{"ckpt-low", "ckpt-high"} {
			tao(t, nil, "delete", job, "-n", ns)
		}
		removeQueued(t, dyn, ns, []string{"ckpt-low", "ckpt-high"}, []kueueObject{
			{"localqueues", ns, "team-c"}, {"clusterqueues", "", "ckpt-preempting"},
			{"workloadpriorityclasses", "", "ckpt-low"}, {"workloadpriorityclasses", "", "ckpt-high"},
		})
	})

	const steps = 60
	file := scriptFile(t, "ckpt.py", checkpointScript)
	submitRealEnv(t, srv.Env("results"), n, ns, "ckpt-low", []string{"--image", image, "--stager-image", n.StagerImage,
		"--nodes", "2", "--memory", "1536Mi", "--shm-size", "256Mi", "--file", file, "--queue", "team-c", "--priority-class", "ckpt-low",
		"--checkpoint-dir", "/ckpt", "--termination-grace-period", "60s", "--env", "STEPS=" + strconv.Itoa(steps), "--env", "SAVE_ON_TERM=1"},
		strings.Replace(torchrunCommand, "--nproc_per_node 2", "--nproc_per_node 1", 1)+"/opt/scripts/ckpt.py")
	follow := taoBackground(t, "logs", "-f", "ckpt-low", "-n", ns)
	follow.waitOutput(t, 3*time.Minute, "rank 0 attempt 1 step 12\n")
	submitReal(t, n, ns, "ckpt-high", []string{"--memory", "1536Mi", "--queue", "team-c", "--priority-class", "ckpt-high"},
		trainerPath, "--steps", "1")
	contains(t, tao(t, nil, "wait", "ckpt-high", "-n", ns, "--timeout", "3m"), 0, "Complete")
	follow.wait(t, 5*time.Minute)
	waitComplete(t, ns, "ckpt-low")

	resumed, firstLogs := checkResumed(t, ns, "ckpt-low", 2, steps)
	saved := regexp.MustCompile(`^rank 0 attempt 1 saved step (\d+) on SIGTERM$`)
	last := -1
	first := firstLogs[0]
	for _, l := range first {
		if m := saved.FindStringSubmatch(l); m != nil {
			last, _ = strconv.Atoi(m[1])
		}
	}
	if last < 12 || resumed[0] != last+1 {
		logLines(t, "rank 0 attempt 1", first)
		t.Errorf("rank 0 saved step %d on SIGTERM and the job resumed at step %d: want the step after the one saved at the preemption", last, resumed[0])
	}
	j, err := client.BatchV1().Jobs(ns).Get(ctx, "ckpt-low", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j.Status.Failed != 0 {
		t.Errorf("failed %d: a preemption must cost no retry", j.Status.Failed)
	}
}

// checkResumed checks every rank of a job that ran more than once: its first attempt started
// at step 0, and its last one (numbered as `logs --attempt` numbers it, which is also what it was
// told in TAO_ATTEMPT) resumed at a step k > 0 right after a checkpoint of rank 0's (the same k
// on every rank), said what it restored, and ran every step from k to the end exactly once.
// It returns each rank's k, and each rank's first attempt's lines.
func checkResumed(t *testing.T, ns, job string, nodes, steps int) (map[int]int, map[int][]string) {
	t.Helper()
	first := jobAttemptLogs(t, ns, job, 1)
	last := map[int][]string{}
	lastAttempt := map[int]int{}
	for attempt := 2; attempt <= 4; attempt++ {
		for rank, lines := range jobAttemptLogs(t, ns, job, attempt) {
			if len(lines) > 0 {
				last[rank], lastAttempt[rank] = lines, attempt
			}
		}
	}
	started := regexp.MustCompile(`^rank (\d+) attempt (\d+) (started at step 0|resumed at step (\d+) from step-(\d+)\.pt)$`)
	resumed := map[int]int{}
	for rank := range nodes {
		if !slices.Contains(first[rank], fmt.Sprintf("rank %d attempt 1 started at step 0", rank)) {
			logLines(t, fmt.Sprintf("rank %d attempt 1", rank), first[rank])
			t.Errorf("rank %d: the first attempt did not start at step 0 (its log is above)", rank)
		}
		a, k := lastAttempt[rank], -1
		for _, l := range last[rank] {
			if m := started.FindStringSubmatch(l); m != nil && m[4] != "" {
				k, _ = strconv.Atoi(m[4])
				if saved, _ := strconv.Atoi(m[5]); m[2] != strconv.Itoa(a) || saved != k-1 {
					t.Errorf("rank %d: %q in attempt %d: want TAO_ATTEMPT=%d, resumed right after the checkpoint's step", rank, l, a, a)
				}
			}
		}
		if k <= 0 {
			logLines(t, fmt.Sprintf("rank %d attempt %d", rank, a), last[rank])
			t.Fatalf("rank %d: the last attempt (%d) did not resume past step 0 (its log is above)", rank, a)
		}
		resumed[rank] = k
		t.Logf("%s rank %d: attempt 1 reached step %d; attempt %d resumed at step %d", job, rank, lastStep(first[rank]), a, k)
		for step := range steps {
			want := 0
			if step >= k {
				want = 1
			}
			line := fmt.Sprintf("rank %d attempt %d step %d", rank, a, step)
			if got := countLines(last[rank], line); got != want {
				t.Errorf("rank %d: %q %d times in the last attempt, want %d", rank, line, got, want)
			}
		}
		if !slices.Contains(last[rank], fmt.Sprintf("rank %d attempt %d done", rank, a)) {
			t.Errorf("rank %d: the last attempt did not finish", rank)
		}
		if !slices.ContainsFunc(last[rank], func(l string) bool { return strings.HasPrefix(l, "kubectl-tao: checkpoints: restored ") }) {
			logLines(t, fmt.Sprintf("rank %d attempt %d", rank, a), last[rank])
			t.Errorf("rank %d: the last attempt's archived log does not say what was restored (it is above)", rank)
		}
	}
	for rank, k := range resumed {
		if k != resumed[0] {
			t.Errorf("rank %d resumed at step %d, rank 0 at %d: every rank must resume from rank 0's checkpoint", rank, k, resumed[0])
		}
	}
	return resumed, first
}

// jobAttemptLogs is `logs --attempt N` of every rank, split by rank, with torchrun's
// "[default0]:" prefix taken off the worker's lines; a rank without that attempt has none.
func jobAttemptLogs(t *testing.T, ns, job string, attempt int) map[int][]string {
	t.Helper()
	r := tao(t, nil, "logs", job, "-n", ns, "--attempt", strconv.Itoa(attempt))
	if r.code != 0 {
		if attempt > 1 {
			return nil
		}
		t.Fatalf("logs --attempt %d: %s", attempt, r)
	}
	out := rankLogs(t, r.stdout)
	for rank, lines := range out {
		for i, l := range lines {
			out[rank][i] = strings.TrimPrefix(l, "[default0]:")
		}
	}
	return out
}

// lastStep is the last "step N" an attempt printed, -1 for none.
func lastStep(lines []string) int {
	last := -1
	rx := regexp.MustCompile(`^rank \d+ attempt \d+ step (\d+)$`)
	for _, l := range lines {
		if m := rx.FindStringSubmatch(l); m != nil {
			last, _ = strconv.Atoi(m[1])
		}
	}
	return last
}

// logLines logs an attempt's lines under a title, before the error that names it: CI keeps the
// end of a failed run's output, and the error line must be in it.
func logLines(t *testing.T, title string, lines []string) {
	t.Helper()
	t.Logf("%s:\n%s", title, strings.Join(lines, "\n"))
}

func countLines(lines []string, line string) int {
	n := 0
	for _, l := range lines {
		if l == line {
			n++
		}
	}
	return n
}
