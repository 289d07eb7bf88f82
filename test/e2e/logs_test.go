//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

const sim = "sim.kubectl-tao.dev/"

// rankLines is what `logs` prints for ranks 0..n-1 of lines steps each, in rank order.
func rankLines(ranks []int, steps int) string {
	var b strings.Builder
	for _, r := range ranks {
		for k := 1; k <= steps; k++ {
			fmt.Fprintf(&b, "[rank %d] rank %d step %d\n", r, r, k)
		}
	}
	return b.String()
}

func TestLogsEveryRankInOrder(t *testing.T) {
	ns := namespace(t)
	r := tao(t, nil, "submit", "four", "-n", ns, "--image", "busybox", "--gpus", "1", "--nodes", "4",
		"--annotation", sim+"run-duration=1s", "--annotation", sim+"log-lines=3", "--", "train")
	if r.code != 0 {
		t.Fatalf("submit: %s", r)
	}
	poll(t, 90*time.Second, "job four to complete", jobFinished(ns, "four", batchv1.JobComplete))

	r = tao(t, nil, "logs", "four", "-n", ns)
	if r.code != 0 || r.stdout != rankLines([]int{0, 1, 2, 3}, 3) || r.stderr != "" {
		t.Fatalf("logs: %s", r)
	}
	r = tao(t, nil, "logs", "job/four", "-n", ns, "--rank", "2", "--rank", "0", "--tail", "1")
	if r.code != 0 || r.stdout != "[rank 0] rank 0 step 3\n[rank 2] rank 2 step 3\n" {
		t.Fatalf("logs --rank --tail: %s", r)
	}
	r = tao(t, nil, "logs", "four", "-n", ns, "--rank", "1", "--no-prefix", "--since", "1h")
	if r.code != 0 || r.stdout != "rank 1 step 1\nrank 1 step 2\nrank 1 step 3\n" {
		t.Fatalf("logs --since 1h: %s", r)
	}
	// The lines were written when the containers started, well over a second ago by now.
	time.Sleep(2 * time.Second)
	r = tao(t, nil, "logs", "four", "-n", ns, "--since", "1s")
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("logs --since 1s: %s", r)
	}
	r = tao(t, nil, "logs", "four", "-n", ns, "--rank", "3", "--timestamps", "--tail", "1")
	if _, err := time.Parse(time.RFC3339Nano, strings.Fields(r.stdout + " x")[2]); r.code != 0 || err != nil || !strings.HasSuffix(r.stdout, " rank 3 step 3\n") {
		t.Fatalf("logs --timestamps: %s", r)
	}
	contains(t, tao(t, nil, "logs", "nope", "-n", ns), 3, `"nope" not found`)
}

// TestLogsSaveRetriedRank: rank 1 of a 2-rank job submitted with --retries is evicted after its
// first lines and run again in a new pod. `logs --save` (from the pods) writes each attempt of
// rank 1 to a file of its own, with that pod's lines, and rank 0's to rank-0.log as before;
// `logs -f --save`, started with the job, writes the same files as the lines come, the second
// attempt's once its pod appears, until the job ends.
func TestLogsSaveRetriedRank(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	r := tao(t, nil, "submit", "resaved", "-n", ns, "--image", "busybox", "--gpus", "8", "--nodes", "2", "--retries", "1",
		"--annotation", sim+"run-duration=8s", "--annotation", sim+"log-lines=8", "--annotation", sim+"log-interval=1s", "--", "train")
	if r.code != 0 {
		t.Fatalf("submit: %s", r)
	}
	followed := filepath.Join(t.TempDir(), "followed")
	saving := taoBackground(t, "logs", "-f", "resaved", "-n", ns, "--save", followed)

	// Evicted once its first line is out, rank 1's first attempt stops short of its 8 lines.
	var victim string
	poll(t, time.Minute, "rank 1's first line", func(ctx context.Context) (bool, error) {
		for _, p := range jobPods(t, ns, "resaved") {
			if rankOf(&p) == "1" && p.Status.Phase == corev1.PodRunning {
				victim = p.Name
			}
		}
		return victim != "" && strings.Contains(tao(t, nil, "logs", "resaved", "-n", ns, "--rank", "1").stdout, "[rank 1] rank 1 step 1\n"), nil
	})
	patch := []byte(`{"metadata":{"labels":{"` + evictLabel + `":"true"}}}`)
	if _, err := client.CoreV1().Pods(ns).Patch(context.Background(), victim, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, cond := terminalJob(t, ns, "resaved"); cond.Type != batchv1.JobComplete {
		t.Fatalf("job ended %s (%s: %s), want Complete", cond.Type, cond.Reason, cond.Message)
	}

	files := " (rank-<N>.log; rank 1 had 2 attempts: rank-1.attempt-1.log, rank-1.attempt-2.log).\n"
	saved := filepath.Join(t.TempDir(), "saved")
	r = tao(t, nil, "logs", "resaved", "-n", ns, "--save", saved)
	if r.code != 0 || r.stdout != "" || !strings.HasPrefix(r.stderr, "Saved ") || !strings.HasSuffix(r.stderr, " lines of 2 ranks in "+saved+files) {
		t.Fatalf("logs --save: %s", r)
	}
	first, err := os.ReadFile(filepath.Join(saved, "rank-1.attempt-1.log"))
	if n := strings.Count(string(first), "\n"); err != nil || n < 1 || n >= 8 || string(first) != strings.ReplaceAll(rankLines([]int{1}, n), "[rank 1] ", "") {
		t.Fatalf("the evicted attempt's file: %q, %v; want its first lines, fewer than 8", first, err)
	}
	want := map[string]string{
		"rank-0.log":           strings.ReplaceAll(rankLines([]int{0}, 8), "[rank 0] ", ""),
		"rank-1.attempt-1.log": string(first),
		"rank-1.attempt-2.log": strings.ReplaceAll(rankLines([]int{1}, 8), "[rank 1] ", ""),
	}
	assertFiles(t, saved, want)

	if r := saving.wait(t, time.Minute); r.code != 0 || r.stdout != "" || !strings.HasSuffix(r.stderr, " lines of 2 ranks in "+followed+files) {
		t.Fatalf("logs -f --save: %s", r)
	}
	assertFiles(t, followed, want)
}

// TestLogsFollowPicksUpLatePodAndEnds runs a 2-rank job that cannot fit at once: each rank wants
// a whole node's GPUs and a blocker holds all nodes but one, so rank 1 starts only after rank 0
// is done. Following must pick rank 1 up when it appears and end with exit 0 when the Job
// completes, with every line exactly once.
func TestLogsFollowPicksUpLatePodAndEnds(t *testing.T) {
	ns := namespace(t)
	nodes, err := client.CoreV1().Nodes().List(context.Background(), metav1ListAll())
	if err != nil {
		t.Fatal(err)
	}
	free := len(nodes.Items) - 1
	if free > 0 {
		r := tao(t, nil, "submit", "blocker", "-n", ns, "--image", "busybox", "--gpus", "8", "--nodes", fmt.Sprint(free),
			"--annotation", sim+"fate=run-forever", "--", "sleep")
		if r.code != 0 {
			t.Fatalf("submit blocker: %s", r)
		}
		poll(t, 60*time.Second, "the blocker to run", func(ctx context.Context) (bool, error) {
			j, err := client.BatchV1().Jobs(ns).Get(ctx, "blocker", metav1Get())
			return err == nil && j.Status.Ready != nil && int(*j.Status.Ready) == free, err
		})
	}
	r := tao(t, nil, "submit", "late", "-n", ns, "--image", "busybox", "--gpus", "8", "--nodes", "2",
		"--annotation", sim+"run-duration=3s", "--annotation", sim+"log-lines=4", "--annotation", sim+"log-interval=500ms", "--", "train")
	if r.code != 0 {
		t.Fatalf("submit: %s", r)
	}
	r = tao(t, nil, "logs", "-f", "late", "-n", ns)
	if r.code != 0 || r.stdout != rankLines([]int{0, 1}, 4) {
		t.Fatalf("logs -f: %s", r)
	}
}

func TestLogsFollowOOMExits9(t *testing.T) {
	ns := namespace(t)
	r := tao(t, nil, "submit", "oom", "-n", ns, "--image", "busybox", "--gpus", "1", "--nodes", "2",
		"--annotation", sim+"fate=oom", "--annotation", sim+"run-duration=2s", "--annotation", sim+"log-lines=2", "--", "train")
	if r.code != 0 {
		t.Fatalf("submit: %s", r)
	}
	r = tao(t, nil, "logs", "-f", "oom", "-n", ns)
	if r.code != 9 || !strings.Contains(r.stderr, "job.batch/oom failed") {
		t.Fatalf("logs -f: %s", r)
	}
	for _, l := range strings.Split(rankLines([]int{0, 1}, 2), "\n") {
		if strings.Count(r.stdout, l+"\n") != 1 && l != "" {
			t.Fatalf("want %q once in stdout: %s", l, r)
		}
	}
}

// TestSubmitFollowDetaches interrupts `submit --follow` and checks the job keeps running.
func TestSubmitFollowDetaches(t *testing.T) {
	ns := namespace(t)
	cmd := exec.Command(binary, "submit", "forever", "-n", ns, "--image", "busybox", "--gpus", "1",
		"--annotation", sim+"fate=run-forever", "--annotation", sim+"log-lines=2", "--follow", "--", "train")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "KUBECONFIG=" + kubeconfig}
	var out, errOut testbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "[rank 0] rank 0 step 2\n") && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	_ = cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(errOut.String(), "kubectl tao cancel forever -n "+ns) {
		t.Fatalf("want exit 1 and the cancel command: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	if out.String() != "[rank 0] rank 0 step 1\n[rank 0] rank 0 step 2\n" {
		t.Fatalf("stdout: %q", out.String())
	}
	if _, err := client.BatchV1().Jobs(ns).Get(context.Background(), "forever", metav1Get()); err != nil {
		t.Fatalf("the job must keep running: %v", err)
	}
}

func metav1Get() metav1.GetOptions      { return metav1.GetOptions{} }
func metav1ListAll() metav1.ListOptions { return metav1.ListOptions{LabelSelector: "type=kwok"} }
