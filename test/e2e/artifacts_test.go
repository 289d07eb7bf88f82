//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/test/s3server"
)

func jobCondition(ns, name string, cond batchv1.JobConditionType) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		j, err := client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range j.Status.Conditions {
			if c.Type == cond && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	}
}

func TestDeleteArtifacts(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	srv := s3server.Start(t)
	srv.MakeBucket(t, "results")

	done := srv.StagedJob(t, client, ns, "trained", "succeed", "results")
	running := srv.StagedJob(t, client, ns, "running", "run-forever", "results")
	uid := string(done.UID)
	mine := []string{"results/trained/" + uid + "/results/model.pth", "results/trained/" + uid + "/results/logs/train.log"}
	others := []string{
		"results/running/" + string(running.UID) + "/results/partial.pth", // the running job's
		"results/trained/00000000-earlier-run/results/model.pth",          // an earlier run of the same name
		"results/trained-2/" + uid + "/x",                                 // another job
	}
	for _, k := range append(append([]string{}, mine...), others...) {
		srv.Put(t, "results", k, []byte("0123456789"))
	}
	poll(t, 60*time.Second, "job trained to complete", jobCondition(ns, "trained", batchv1.JobComplete))
	poll(t, 60*time.Second, "job running to run", runningPods(ns, "running", 1))

	var printed []string
	run := func(args ...string) result {
		r := tao(t, nil, append(args, "-n", ns)...)
		printed = append(printed, r.stdout, r.stderr)
		return r
	}

	// A running job is refused, and nothing is touched.
	r := run("delete-artifacts", "running")
	contains(t, r, 1, "job.batch/running is Running, not finished")

	// A dry run lists what would go, and removes nothing.
	r = run("delete-artifacts", "trained", "--dry-run")
	if r.code != 0 || !strings.Contains(r.stdout, "s3://results/"+mine[0]+" (10 B)") ||
		!strings.HasSuffix(r.stdout, "job.batch/trained deleted; 2 objects (20 B) removed from s3://results/results/trained/"+uid+"/ (dry run)\n") {
		t.Fatalf("dry run: %s", r)
	}
	if got := srv.Keys(t, "results", "results/"); len(got) != len(mine)+len(others) {
		t.Fatalf("a dry run removed objects: %v", got)
	}
	if _, err := client.BatchV1().Jobs(ns).Get(ctx, "trained", metav1.GetOptions{}); err != nil {
		t.Fatalf("a dry run deleted the job: %v", err)
	}

	// The real thing: the job and its pods are gone when it returns, then only its prefix.
	start := time.Now()
	r = run("delete-artifacts", "trained")
	if r.code != 0 || r.stdout != "job.batch/trained deleted; 2 objects (20 B) removed from s3://results/results/trained/"+uid+"/\n" {
		t.Fatalf("delete-artifacts: %s", r)
	}
	t.Logf("delete-artifacts took %s", time.Since(start).Round(time.Millisecond))
	if _, err := client.BatchV1().Jobs(ns).Get(ctx, "trained", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the job is still there: %v", err)
	}
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.ControllerUidLabel + "=" + uid})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("pods of the job remain: %v %v", pods, err)
	}
	left := strings.Join(srv.Keys(t, "results", "results/"), " ")
	for _, k := range others {
		if !strings.Contains(left, k) {
			t.Errorf("%s was removed", k)
		}
	}
	for _, k := range mine {
		if strings.Contains(left, k) {
			t.Errorf("%s was not removed", k)
		}
	}
	// The Secret went with the Job (garbage collected: it is owned by it).
	poll(t, 60*time.Second, "secret trained-s3 to be collected", func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Secrets(ns).Get(ctx, "trained-s3", metav1.GetOptions{})
		return apierrors.IsNotFound(err), ignoreNotFound(err)
	})
	// Run again: the job is gone.
	contains(t, run("delete-artifacts", "trained"), 3, "job.batch/trained not found")

	for _, out := range printed {
		if leaks := srv.Leaks(out); len(leaks) > 0 {
			t.Errorf("a secret value was printed: %q", out)
		}
	}
}
