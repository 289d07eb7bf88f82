//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

// TestRealNodeCancelDeliversSIGTERM cancels a running 2-rank trainer job while its log is
// followed: each rank's SIGTERM handler writes a final checkpoint and says so, the follow shows
// it and ends, and cancel returns only once the pods are gone, well within the grace period.
// The second case first follows through `submit --follow` and detaches with Ctrl-C, which must
// leave the job running.
func TestRealNodeCancelDeliversSIGTERM(t *testing.T) {
	n := realNode(t)
	t.Parallel()
	ns := namespace(t)
	long := []string{trainerPath, "--steps", "100000", "--step-delay", "250ms"}
	flags := []string{"--nodes", "2", "--shm-size", "64Mi"}
	twoSteps := []string{"[rank 0] rank 0 step 2\n", "[rank 1] rank 1 step 2\n"}

	t.Run("logs-follow", func(t *testing.T) {
		t.Parallel()
		submitReal(t, n, ns, "long", flags, long...)
		follow := taoBackground(t, "logs", "-f", "long", "-n", ns)
		follow.waitOutput(t, 2*time.Minute, twoSteps...)
		cancelAndCheckSIGTERM(t, ns, "long", follow)
	})
	t.Run("submit-follow-ctrl-c", func(t *testing.T) {
		t.Parallel()
		args := append([]string{"submit", "detached", "-n", ns, "--image", n.Image, "--gpus", "0", "--follow",
			"--node-selector", realNodeSelector, "--toleration", realNodeToleration}, flags...)
		submit := taoBackground(t, append(append(args, "--"), long...)...)
		submit.waitOutput(t, 2*time.Minute, twoSteps...)
		_ = submit.cmd.Process.Signal(syscall.SIGINT)
		if r := submit.wait(t, 30*time.Second); r.code != 1 || !strings.Contains(r.stderr, "kubectl tao cancel detached -n "+ns) {
			t.Fatalf("submit --follow after Ctrl-C: want exit 1 and the cancel command, got %s", r)
		}
		// Detached, not stopped: the ranks go on.
		poll(t, 10*time.Second, "both ranks still running", runningPods(ns, "detached", 2))
		follow := taoBackground(t, "logs", "-f", "detached", "-n", ns)
		follow.waitOutput(t, 30*time.Second, twoSteps...)
		cancelAndCheckSIGTERM(t, ns, "detached", follow)
	})
}

// cancelQuickly runs `kubectl tao cancel` with a grace period of grace seconds and checks what a
// program that stops on SIGTERM gives: cancel returns within half the grace period (a kubelet
// SIGKILL at its end would take all of it) and no pod of the job is left. who names what had
// to stop, for the message.
func cancelQuickly(t *testing.T, ns, job string, grace int, who string) {
	t.Helper()
	start := time.Now()
	contains(t, tao(t, nil, "cancel", job, "-n", ns, "--grace-period", fmt.Sprint(grace), "--timeout", "90s"), 0, "job.batch/"+job+" canceled\n")
	took := time.Since(start)
	t.Logf("cancel took %s", took.Round(time.Millisecond))
	pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("cancel returned with %d pods left, e.g. %s (%s)", len(pods.Items), pods.Items[0].Name, pods.Items[0].Status.Phase)
	}
	if took > time.Duration(grace)*time.Second/2 {
		t.Errorf("cancel took %s with a %ds grace period: %s did not stop on SIGTERM", took.Round(time.Millisecond), grace, who)
	}
}

// cancelAndCheckSIGTERM cancels a running trainer job of 2 ranks whose log follow is following.
// Each rank's own log stream, opened before the cancel, is the evidence that SIGTERM reached the
// trainer; follow's output is kubectl-tao's view of the same.
func cancelAndCheckSIGTERM(t *testing.T, ns, job string, follow *background) {
	t.Helper()
	streams := podLogStreams(t, ns, job)
	cancelQuickly(t, ns, job, 30, "the ranks")

	sigterm := func(rank int) *regexp.Regexp {
		return regexp.MustCompile(fmt.Sprintf(`(?m)^rank %d got SIGTERM at step \d+, wrote final checkpoint /tmp/trainer-results/rank-%d/final$`, rank, rank))
	}
	for rank, s := range streams {
		if out := s.wait(t); !sigterm(rank).MatchString(out) {
			t.Errorf("rank %d: no SIGTERM line with its final checkpoint in the container's log:\n%s", rank, out)
		}
	}
	fr := follow.wait(t, 60*time.Second)
	if fr.code != 10 {
		t.Errorf("logs -f of a canceled job: want exit 10 (Canceled), got %s", fr)
	}
	t.Run("logs-f-shows-the-sigterm-lines", func(t *testing.T) {
		logs := rankLogs(t, fr.stdout)
		for rank := range 2 {
			if !slices.ContainsFunc(logs[rank], sigterm(rank).MatchString) {
				t.Errorf("rank %d: no SIGTERM line in kubectl tao logs -f: %s", rank, fr)
			}
		}
	})
}

// logStream is one container's log, followed with client-go straight from the kubelet.
type logStream struct {
	out  testbuf.Buffer
	done chan error
}

// podLogStreams follows the log of each rank of a running job, by rank.
func podLogStreams(t *testing.T, ns, job string) map[int]*logStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		t.Fatal(err)
	}
	streams := map[int]*logStream{}
	for _, p := range pods.Items {
		rank, err := strconv.Atoi(p.Annotations[batchv1.JobCompletionIndexAnnotation])
		if err != nil {
			t.Fatalf("pod %s has no completion index", p.Name)
		}
		rc, err := client.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "tao", Follow: true}).Stream(ctx)
		if err != nil {
			t.Fatalf("following %s: %v", p.Name, err)
		}
		s := &logStream{done: make(chan error, 1)}
		streams[rank] = s
		go func() {
			_, err := io.Copy(&s.out, rc)
			rc.Close()
			s.done <- err
		}()
	}
	return streams
}

// wait waits for the stream to end, as a kubelet ends it once the container has exited.
func (s *logStream) wait(t *testing.T) string {
	t.Helper()
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("log stream: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Errorf("log stream still open 60s after the cancel")
	}
	return s.out.String()
}

// TestRealNodeOOMKill runs a job whose rank 1 allocates past its --memory limit: the kernel
// kills it, the Job fails, and diagnose names rank 1, OOMKilled and 137.
func TestRealNodeOOMKill(t *testing.T) {
	n := realNode(t)
	t.Parallel()
	ns := namespace(t)
	script := fmt.Sprintf(`if [ "$NODE_RANK" = 1 ]; then exec %[1]s --eat-memory; fi
exec %[1]s --steps 100000 --step-delay 250ms`, trainerPath)
	submitReal(t, n, ns, "oom", []string{"--nodes", "2", "--memory", "64Mi", "--shm-size", "0"}, script)
	poll(t, 3*time.Minute, "status Error", statusIs(t, ns, "oom", "Error"))
	a := diagnoseUntil(t, ns, "oom", func(a analysis) bool { return a.ErrClass != nil })
	if *a.ErrClass != "ERR_PROGRAM" || len(a.Events) == 0 {
		t.Fatalf("analysis = %+v", a)
	}
	e := a.Events[0]
	if e.Name != "OOMKilled" || e.Rank != 1 || e.Node != n.Name || e.ExitCode == nil || *e.ExitCode != 137 {
		t.Fatalf("first event = %+v, want rank 1 OOMKilled (137) on %s", e, n.Name)
	}
	contains(t, tao(t, nil, "diagnose", "oom", "-n", ns), 0, "rank 1: OOMKilled", "on node "+n.Name, "Class: ERR_PROGRAM")
}

// TestRealNodeImagePullFailure names an image on a loopback registry that is not there: the
// real kubelet's ErrImagePull / ImagePullBackOff reaches replicas and diagnose.
func TestRealNodeImagePullFailure(t *testing.T) {
	n := realNode(t)
	t.Parallel()
	ns := namespace(t)
	const image = "127.0.0.1:1/absent:1"
	submitReal(t, n, ns, "absent", []string{"--image", image}, "true")
	reps, last := replicasUntil(t, ns, "absent", func(r []replica) bool {
		return len(r) == 1 && r[0].Status.ReadinessIssue != nil &&
			(r[0].Status.ReadinessIssue.Reason == "ErrImagePull" || r[0].Status.ReadinessIssue.Reason == "ImagePullBackOff")
	})
	if issue := reps[0].Status.ReadinessIssue; !strings.Contains(issue.Message, image) || reps[0].Node != n.Name {
		t.Errorf("replica %+v, issue %+v: want the image named, on %s\n%s", reps[0], *issue, n.Name, last)
	}
	a := diagnoseUntil(t, ns, "absent", func(a analysis) bool { return a.ErrClass != nil })
	if *a.ErrClass != "ERR_INFRA" || len(a.Events) == 0 ||
		(a.Events[0].Name != "ImagePullBackOff" && a.Events[0].Name != "ErrImagePull") || a.Suggestion == "" {
		t.Fatalf("analysis = %+v", a)
	}
	contains(t, tao(t, nil, "diagnose", "absent", "-n", ns), 0, image)
}
