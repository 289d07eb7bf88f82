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

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// stopScript is a plain python3 training loop (no torchrun, no process group) written as
// docs/retries.md tells users to write one: on SIGTERM it saves {"step": n} of the last step
// done with torch.save and exits 0. Each attempt leaves an output of its own: a stopped one
// /results/stopped-<attempt>.txt, the one that finishes /results/final.txt.
const stopScript = `import os, signal, sys, time
import torch

def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()

ckpt, resume, attempt = os.environ["TAO_CHECKPOINT_DIR"], os.environ.get("TAO_RESUME_CHECKPOINT", ""), os.environ["TAO_ATTEMPT"]
os.makedirs("/results", exist_ok=True)  # a new pod's disk is empty, and the image has no mkdir
start = 0
if resume:
    start = torch.load(resume)["step"] + 1
    say(f"attempt {attempt} resumed at step {start} from {os.path.basename(resume)}")
else:
    say(f"attempt {attempt} started at step 0")
stop = False
def on_term(signum, frame):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
done = start - 1
for step in range(start, int(os.environ["STEPS"])):
    if stop:
        if done >= 0:
            torch.save({"step": done}, f"{ckpt}/step-{done}.pt")
            say(f"attempt {attempt} saved step {done} on SIGTERM")
        with open(f"/results/stopped-{attempt}.txt", "w") as f:
            f.write(f"attempt {attempt} stopped before step {step}\n")
        sys.exit(0)
    say(f"attempt {attempt} step {step}")
    done = step
    time.sleep(0.5)
with open("/results/final.txt", "w") as f:
    f.write(f"attempt {attempt} finished\n")
say(f"attempt {attempt} done")
`

// TestRealNodeStoppedAttemptIsNotDone evicts, through the Eviction API, a plain python3 job
// that saves and exits 0 on SIGTERM: the stopped attempt must not count as done. The Job is not
// Complete after the eviction, a new pod resumes right after the step saved at the SIGTERM,
// no retry is spent (failed stays 0), the Job completes, and the run's outputs are those of the
// attempt that finished, none of the stopped one's. All of it within Kubernetes' default 30 s
// grace period: the stopped attempt's checkpoint and its whole log archive are in S3.
func TestRealNodeStoppedAttemptIsNotDone(t *testing.T) {
	rig := newTorchRig(t)
	n, ns, srv := rig.n, rig.ns, rig.srv
	ctx := context.Background()
	const job, steps = "stopped", 40
	submitRealEnv(t, srv.Env("results"), n, ns, job, rig.flags(scriptFile(t, "stop.py", stopScript), 1, "--output-path", "/results", "--retries", "1",
		"--env", "STEPS="+strconv.Itoa(steps)), "python3", "/opt/scripts/stop.py")
	follow := taoBackground(t, "logs", "-f", job, "-n", ns)
	follow.waitOutput(t, 3*time.Minute, "attempt 1 step 5\n")
	evicted := rankPods(t, ns, job)[0]
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: evicted, Namespace: ns}}
	if err := client.PolicyV1().Evictions(ns).Evict(ctx, ev); err != nil {
		t.Fatalf("evicting pod %s: %v", evicted, err)
	}
	// Until a new pod runs, the Job must never be Complete: the command exited 0, but the pod
	// was told to stop, and an index recorded done would never be retried.
	poll(t, 2*time.Minute, "a new pod after the eviction", func(ctx context.Context) (bool, error) {
		j, err := client.BatchV1().Jobs(ns).Get(ctx, job, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if j.Status.Succeeded != 0 || slices.ContainsFunc(j.Status.Conditions, func(c batchv1.JobCondition) bool {
			return c.Type == batchv1.JobComplete
		}) {
			return false, fmt.Errorf("the Job counts the evicted pod %s as done: succeeded %d, conditions %+v", evicted, j.Status.Succeeded, j.Status.Conditions)
		}
		pods := jobPods(t, ns, job)
		return slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Name != evicted && p.Status.Phase == corev1.PodRunning }), nil
	})
	out := follow.wait(t, 4*time.Minute).stdout
	waitComplete(t, ns, job)
	// The evicted pod said why it ended 143 while its log was still followed.
	if !strings.Contains(out, "kubectl-tao: the pod was told to stop (SIGTERM): the command exited 0; exiting 143 so that this attempt does not count as done") ||
		!strings.Contains(out, "kubectl-tao: stage out skipped: the outputs of a stopped attempt are not the run's results") {
		t.Errorf("logs -f does not show the stopped attempt's end:\n%s", out)
	}

	first, last := jobAttemptLogs(t, ns, job, 1)[0], jobAttemptLogs(t, ns, job, 2)[0]
	saved, savedRx := -1, regexp.MustCompile(`^attempt 1 saved step (\d+) on SIGTERM$`)
	for _, l := range first {
		if m := savedRx.FindStringSubmatch(l); m != nil {
			saved, _ = strconv.Atoi(m[1])
		}
	}
	if saved < 5 {
		logLines(t, "attempt 1", first)
		t.Fatalf("attempt 1 saved no step at least 5 on SIGTERM (its log is above)")
	}
	want := fmt.Sprintf("attempt 2 resumed at step %d from step-%d.pt", saved+1, saved)
	if !slices.Contains(last, want) || !slices.Contains(last, "attempt 2 done") || countLines(last, fmt.Sprintf("attempt 2 step %d", saved)) != 0 {
		logLines(t, "attempt 2", last)
		t.Errorf("attempt 2: want %q, no step %d again, and the end (its log is above)", want, saved)
	}
	t.Logf("attempt 1 saved step %d on SIGTERM; attempt 2 resumed at step %d", saved, saved+1)

	j, err := client.BatchV1().Jobs(ns).Get(ctx, job, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j.Status.Failed != 0 || j.Status.Succeeded != 1 {
		t.Errorf("failed %d, succeeded %d: want 0 and 1 (an eviction costs no retry)", j.Status.Failed, j.Status.Succeeded)
	}
	// The run's outputs are the finished attempt's alone.
	prefix := jobPrefix(t, ns, job)
	var outputs []string
	for _, k := range srv.Keys(t, "results", prefix) {
		if !strings.HasPrefix(k, prefix+s3layout.ToolDir+"/") {
			outputs = append(outputs, strings.TrimPrefix(k, prefix))
		}
	}
	if !slices.Equal(outputs, []string{"results/final.txt"}) {
		t.Errorf("the run's outputs are %q, want only results/final.txt, the finished attempt's", outputs)
	}
	if got := string(srv.Get(t, "results", prefix+"results/final.txt")); got != "attempt 2 finished\n" {
		t.Errorf("results/final.txt = %q, want the second attempt's", got)
	}
	// The stopped attempt's archive was uploaded after its last line, within the grace period.
	archive := string(srv.Get(t, "results", s3layout.LogArchiveKey(prefix, 0, evicted)))
	if !strings.Contains(archive, fmt.Sprintf("attempt 1 saved step %d on SIGTERM\n", saved)) || !strings.Contains(archive, "this attempt uploaded") {
		t.Errorf("the stopped attempt's archive lacks its last lines:\n%s", archive)
	}
}
