//go:build e2e

package e2e

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/test/s3server"
)

// Python block-buffers stdout when it is a pipe, as it is in every container; submit's
// PYTHONUNBUFFERED=1 is what brings a rank's lines to the kubelet as they are printed. These
// scripts never flush on purpose (the torchrun one writes each line in one call: torchrunCommand
// says why).

// stepsScript all-reduces 80 times, half a second apart, printing a line per step without
// flushing: about 40 s, far longer than it takes to see the first steps' lines.
const stepsScript = `import sys, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(80):
    t = torch.tensor([1])
    dist.all_reduce(t)
    sys.stdout.write(f"unbuffered rank {rank} step {step} world {int(t.item())}\n")
    time.sleep(0.5)
sys.stdout.write(f"unbuffered rank {rank} done\n")
dist.destroy_process_group()
`

// TestRealNodeUnbufferedTorchrun runs a 2-node torchrun job (torchrun --redirects 1 --tee 1
// copies each worker's stdout through its own Python stdout) whose workers print a line per
// step without flushing: `logs -f` must show the first steps of both nodes while the job still
// runs, not when its processes exit.
func TestRealNodeUnbufferedTorchrun(t *testing.T) {
	n := realNode(t)
	image := torchImage(t, n)
	t.Parallel()
	ns := namespace(t)
	const job = "steps"
	submitReal(t, n, ns, job, []string{"--image", image, "--nodes", "2", "--file", scriptFile(t, "steps.py", stepsScript)},
		torchrunCommand+"/opt/scripts/steps.py")
	follow := taoBackground(t, "logs", "-f", job, "-n", ns)
	follow.waitOutput(t, 3*time.Minute, "[rank 0] [default0]:unbuffered rank 0 step 1 world 4\n", "[rank 1] [default0]:unbuffered rank 2 step 1 world 4\n")
	seen := follow.out.String()
	if running, err := jobRunning(context.Background(), ns, job); err != nil || !running {
		t.Fatalf("the first steps' lines arrived only once the job's containers had ended (running: %v, %v):\n%s", running, err, seen)
	}
	// Ten seconds of steps later: a block-buffered stdout would hold back a few KiB, some 40
	// steps, and let the first lines out only with those.
	if strings.Contains(seen, " step 20 world") {
		t.Fatalf("the first steps' lines arrived only with later ones, as a buffer filled:\n%s", seen)
	}
	r := follow.wait(t, 3*time.Minute)
	if r.code != 0 {
		t.Fatalf("logs -f: %s", r)
	}
	// Every process printed every step, each line once, and its last line.
	rx := regexp.MustCompile(`(?m)^\[rank \d\] \[default\d\]:unbuffered rank (\d) step \d+ world 4$`)
	if got := len(rx.FindAllString(r.stdout, -1)); got != 4*80 {
		t.Errorf("logs -f printed %d step lines, want 4 processes × 80:\n%s", got, r.stdout)
	}
	for rank := range 4 {
		if !strings.Contains(r.stdout, "unbuffered rank "+strconv.Itoa(rank)+" done\n") {
			t.Errorf("process %d's last line is missing:\n%s", rank, r.stdout)
		}
	}
}

// jobRunning reports whether the Job is unfinished and no container of its pods has ended.
func jobRunning(ctx context.Context, ns, job string) (bool, error) {
	j, err := client.BatchV1().Jobs(ns).Get(ctx, job, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	for _, c := range j.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			return false, nil
		}
	}
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job})
	if err != nil {
		return false, err
	}
	for _, p := range pods.Items {
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Running == nil {
				return false, nil
			}
		}
	}
	return len(pods.Items) > 0, nil
}

// oomScript prints a line without flushing, waits past the log archive's first upload (once a
// minute while the command runs: an OOM kill of the container may take the wrapper, and its
// final upload, with it), then allocates until the kernel kills it. It makes its output folder
// itself: the torch image has python3, sh and bash, not mkdir.
const oomScript = `import os, time
os.makedirs("/results", exist_ok=True)
print("the last line before the OOM kill")
time.sleep(70)
hog = []
while True:
    hog.append(b"x" * (1 << 20))
`

// TestRealNodeUnbufferedOOMKill: a Python program OOM-killed under --memory loses nothing it
// printed: its last line is in `kubectl tao logs` from the pod, and in the log archive read
// once the Job is deleted.
func TestRealNodeUnbufferedOOMKill(t *testing.T) {
	n := stagerNode(t)
	image := torchImage(t, n)
	t.Parallel()
	ns := namespace(t)
	srv := s3server.StartOn(t, n.IP)
	srv.MakeBucket(t, "results")
	shell := srv.Env("results")
	const job = "oom-unbuffered"
	const last = "[rank 0] the last line before the OOM kill\n"
	submitRealEnv(t, shell, n, ns, job, []string{"--image", image, "--memory", "128Mi", "--shm-size", "0",
		"--stager-image", n.StagerImage, "--output-path", "/results", "--file", scriptFile(t, "oom.py", oomScript)},
		"python3 /opt/scripts/oom.py")
	if err := pollErr(4*time.Minute, jobFinished(ns, job, batchv1.JobFailed)); err != nil {
		t.Fatalf("%v\n%s", err, tao(t, nil, "logs", job, "-n", ns))
	}
	pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods: %v, %v", pods, err)
	}
	for _, s := range pods.Items[0].Status.ContainerStatuses {
		if s.State.Terminated == nil || s.State.Terminated.Reason != "OOMKilled" {
			t.Fatalf("container %s: %+v, want OOMKilled (the test proves nothing otherwise)", s.Name, s.State)
		}
	}
	r := tao(t, nil, "logs", job, "-n", ns)
	if r.code != 0 || !strings.Contains(r.stdout, last) {
		t.Errorf("logs from the pod lack %q: %s", last, r)
	}
	deleteJob(t, ns, job)
	after := tao(t, shell, "logs", job, "-n", ns)
	if after.code != 0 || !strings.Contains(after.stderr, "Reading the archived logs of job.batch/"+job+" (uid ") || !strings.Contains(after.stdout, last) {
		t.Errorf("logs from the archive lack %q: %s", last, after)
	}
	if leaks := srv.Leaks(r.stdout, after.stdout, after.stderr); len(leaks) > 0 {
		t.Error("a credential was printed")
	}
}
