//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What only a real container reveals: an image without bash, and a training program without a
// SIGTERM handler (it would ignore SIGTERM as PID 1; the pod shares its PID namespace so it is
// not).

// TestRealNodeImageWithoutBash runs jobs on an image that has only /bin/sh: an argv command must
// run there, and a bash string must fail with an explanation instead of a bare StartError.
func TestRealNodeImageWithoutBash(t *testing.T) {
	n := realNode(t)
	if n.ShOnlyImage == "" {
		t.Fatalf("TAO_REAL_NODE=%s but TAO_SH_ONLY_IMAGE is not set", n.Name)
	}
	t.Parallel()
	ns := namespace(t)
	t.Run("argv", func(t *testing.T) {
		t.Parallel()
		submitReal(t, n, ns, "sh-argv", []string{"--image", n.ShOnlyImage}, "/bin/sh", "-c", "echo hello from sh")
		waitComplete(t, ns, "sh-argv")
		contains(t, tao(t, nil, "logs", "sh-argv", "-n", ns), 0, "[rank 0] hello from sh")
	})
	t.Run("bash-string", func(t *testing.T) {
		t.Parallel()
		// --retries: a command that cannot start fails at once (exit 128 is a fail-at-once code),
		// instead of buying more runs.
		submitReal(t, n, ns, "sh-string", []string{"--image", n.ShOnlyImage, "--retries", "3"}, "echo hello from bash")
		a := diagnoseUntil(t, ns, "sh-string", func(a analysis) bool { return a.ErrClass != nil && a.Status == "Error" })
		if len(a.Events) == 0 || a.Events[0].ExitCode == nil || *a.Events[0].ExitCode != 128 || !strings.Contains(a.Suggestion, "/bin/bash") {
			t.Fatalf("diagnose of a bash string on an image without bash: %+v, want exit 128 and a suggestion naming /bin/bash", a)
		}
		pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=sh-string"})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != 1 {
			t.Errorf("%d pods for a job whose command cannot start, want 1: --retries must not rerun it", len(pods.Items))
		}
	})
}

// TestRealNodeCancelOfAProgramWithoutSIGTERMHandler cancels a rank whose program installs no
// SIGTERM handler, as a plain `python train.py` does not: as PID 1 it would ignore SIGTERM and
// live until the grace period ends. sleep is such a program. (Not the trainer with its handler
// left out: Go's runtime has its own, which ends the process.)
func TestRealNodeCancelOfAProgramWithoutSIGTERMHandler(t *testing.T) {
	n := realNode(t)
	t.Parallel()
	ns := namespace(t)
	submitReal(t, n, ns, "nohandler", nil, "sleep", "600")
	rankPod(t, ns, "nohandler", 0, corev1.PodRunning)
	cancelQuickly(t, ns, "nohandler", 20, "a program without a SIGTERM handler")
}
