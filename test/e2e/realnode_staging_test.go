//go:build e2e

package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/test/s3server"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/trickyargs"
)

// TestRealNodeStaging runs staged jobs on the real node against the S3 test server, which
// listens on the node's bridge address so that the stager in the pods reaches it: the input
// arrives at its path, the tricky argv entries reach the trainer through the staging wrapper,
// the checkpoints land under results/<job-name>/<job-uid>/, delete-artifacts removes them, and
// a failed upload fails the job.
func TestRealNodeStaging(t *testing.T) {
	n := stagerNode(t)
	t.Parallel()
	ns := namespace(t)
	srv := s3server.StartOn(t, n.IP)
	srv.MakeBucket(t, "datasets")
	srv.MakeBucket(t, "results")
	spec := "epochs: 2\n# üñí $(HOME) $$\n"
	srv.Put(t, "datasets", "specs/train.yaml", []byte(spec))
	staged := []string{"--stager-image", n.StagerImage, "--shm-size", "0", "--env", literalEnv,
		"--input", "/data/train.yaml=s3://datasets/specs/train.yaml", "--output-path", "/results"}
	command := append([]string{trainerPath, "--print-args", "--spec", "/data/train.yaml", "--results", "/results",
		"--steps", "2", "--rendezvous=false", "--"}, trickyargs.Args...)

	for _, nodes := range []int{1, 2} {
		t.Run(strconv.Itoa(nodes)+"-ranks", func(t *testing.T) {
			t.Parallel()
			job := "staged-" + strconv.Itoa(nodes)
			submitRealEnv(t, srv.Env("results"), n, ns, job, append(slices.Clone(staged), "--nodes", strconv.Itoa(nodes)), command...)
			waitComplete(t, ns, job)
			logs := jobLogs(t, ns, job)
			assertArgv(t, logs, nodes, func(int) []string { return trickyargs.Args })
			for rank := range nodes {
				var got struct{ Hex string }
				trainerJSON(t, logs[rank], rank, "spec", &got)
				if b, _ := hex.DecodeString(got.Hex); string(b) != spec {
					t.Errorf("rank %d: staged input = %q, want %q", rank, b, spec)
				}
			}
			j, err := client.BatchV1().Jobs(ns).Get(context.Background(), job, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// Only rank 0 uploads the outputs: the keys carry no rank of kubectl-tao's own.
			// Every rank uploads its own log archive.
			prefix := "results/" + job + "/" + string(j.UID) + "/"
			var want []string
			pods := rankPods(t, ns, job)
			for rank := range nodes {
				want = append(want, s3layout.LogArchiveKey(prefix, rank, pods[rank]))
			}
			want = append(want, prefix+"results/rank-0/ckpt-000001", prefix+"results/rank-0/ckpt-000002")
			if keys := srv.Keys(t, "results", "results/"+job+"/"); !slices.Equal(keys, want) {
				t.Fatalf("uploaded %q, want %q", keys, want)
			}
			checkArchive(t, srv, "results", prefix, logs, pods)
			r := tao(t, nil, "delete-artifacts", job, "-n", ns)
			if r.code != 0 || !strings.HasSuffix(r.stdout, "removed from s3://results/"+prefix+"\n") {
				t.Fatalf("delete-artifacts: %s", r)
			}
			if keys := srv.Keys(t, "results", "results/"+job+"/"); len(keys) != 0 {
				t.Errorf("left after delete-artifacts: %q", keys)
			}
			if leaks := srv.Leaks(r.stdout, r.stderr, strings.Join(slices.Concat(logs[0], logs[1]), "\n")); len(leaks) > 0 {
				t.Errorf("a credential was printed")
			}
		})
	}

	t.Run("failed-upload", func(t *testing.T) {
		t.Parallel()
		// The bucket does not exist: the command succeeds, its results cannot be kept. With
		// --retries the staging code fails the job at once: no second training run.
		submitRealEnv(t, srv.Env("no-such-bucket"), n, ns, "lost", []string{"--stager-image", n.StagerImage, "--output-path", "/results", "--retries", "2"},
			trainerPath, "--results", "/results", "--steps", "1")
		if err := pollErr(3*time.Minute, jobFinished(ns, "lost", batchv1.JobFailed)); err != nil {
			t.Fatalf("a job whose upload failed: %v\n%s", err, tao(t, nil, "logs", "lost", "-n", ns))
		}
		contains(t, tao(t, nil, "logs", "lost", "-n", ns), 0, "rank 0 done, exit code 0", "kubectl-tao: stage out failed",
			"kubectl-tao: log archive: the final upload failed")
		pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=lost"})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != 1 {
			t.Errorf("%d pods: a failed upload was retried", len(pods.Items))
		}
		contains(t, tao(t, nil, "diagnose", "lost", "-n", ns), 0, "StagingFailed", "exit code 202", "a staging failure")
	})

	// A failed and a canceled 2-rank job: every rank's log is in S3 all the same, the cancel's
	// SIGTERM handler lines included (the upload comes after the signal).
	t.Run("failed-and-canceled", func(t *testing.T) {
		t.Parallel()
		flags := []string{"--stager-image", n.StagerImage, "--shm-size", "64Mi", "--output-path", "/results", "--nodes", "2"}
		submitRealEnv(t, srv.Env("results"), n, ns, "failing", flags, trainerPath, "--results", "/results", "--steps", "2", "--exit", "3")
		submitRealEnv(t, srv.Env("results"), n, ns, "canceled", flags, trainerPath, "--results", "/results", "--steps", "100000", "--step-delay", "250ms")

		if err := pollErr(3*time.Minute, jobFinished(ns, "failing", batchv1.JobFailed)); err != nil {
			t.Fatalf("failing: %v", err)
		}
		checkArchive(t, srv, "results", jobPrefix(t, ns, "failing"), jobLogs(t, ns, "failing"), rankPods(t, ns, "failing"))

		follow := taoBackground(t, "logs", "-f", "canceled", "-n", ns)
		follow.waitOutput(t, 2*time.Minute, "[rank 0] rank 0 step 2\n", "[rank 1] rank 1 step 2\n")
		prefix := jobPrefix(t, ns, "canceled")
		streams := podLogStreams(t, ns, "canceled")
		pods := rankPods(t, ns, "canceled")
		cancelQuickly(t, ns, "canceled", 30, "the staged ranks")
		for rank, st := range streams {
			out := st.wait(t)
			got := string(srv.Get(t, "results", s3layout.LogArchiveKey(prefix, rank, pods[rank])))
			sigterm := fmt.Sprintf("rank %d got SIGTERM at step ", rank)
			if !strings.Contains(got, sigterm) || !strings.Contains(out, sigterm) {
				t.Errorf("rank %d: no %q in the archive:\n%s", rank, sigterm, got)
			}
			// The archive holds the command's lines, as the pod printed them.
			if !strings.Contains(out, strings.TrimSuffix(got, "\n")) {
				t.Errorf("rank %d: the archive is not the pod's log:\narchive:\n%s\npod:\n%s", rank, got, out)
			}
		}
	})
}

// jobPrefix is the results prefix of a Job's run.
func jobPrefix(t *testing.T, ns, job string) string {
	t.Helper()
	j, err := client.BatchV1().Jobs(ns).Get(context.Background(), job, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s3layout.ResultsPrefix(job, string(j.UID))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkArchive compares every rank's archived log with its lines from `kubectl tao logs`: the
// archive holds the command's lines in order, the pod's log also the stager's around them.
func checkArchive(t *testing.T, srv *s3server.Server, bucket, prefix string, logs map[int][]string, pods map[int]string) {
	t.Helper()
	for rank, lines := range logs {
		got := strings.TrimSuffix(string(srv.Get(t, bucket, s3layout.LogArchiveKey(prefix, rank, pods[rank]))), "\n")
		if got == "" || !strings.Contains(strings.Join(lines, "\n"), got) {
			t.Errorf("rank %d: archive\n%s\nis not in the pod's log\n%s", rank, got, strings.Join(lines, "\n"))
		}
	}
}

// rankPods is the pod of each rank of a job that ran each rank once: its log archive is keyed by
// the pod's name (one object per attempt).
func rankPods(t *testing.T, ns, job string) map[int]string {
	t.Helper()
	pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: jobpods.Selector(job)})
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, p := range pods.Items {
		r := jobpods.Rank(&p)
		if prev, ok := out[r]; ok {
			t.Fatalf("job %s ran rank %d twice (pods %s, %s)", job, r, prev, p.Name)
		}
		out[r] = p.Name
	}
	return out
}

// stagerNode is the real node for a staged job: it needs the stager image (make stager-image,
// which `make e2e` builds when the node is on).
func stagerNode(t *testing.T) realNodeEnv {
	t.Helper()
	n := realNode(t)
	if n.StagerImage == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("the real node has no stager image under CI=true")
		}
		t.Skip("the real node has no stager image (make stager-image)")
	}
	return n
}
