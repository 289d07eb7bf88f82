//go:build e2e

package e2e

import (
	"context"
	"encoding/hex"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/test/s3server"
	"github.com/kubectl-tao/kubectl-tao/test/trickyargs"
)

// TestRealNodeStaging runs staged jobs on the real node against the S3 test server, which
// listens on the node's bridge address so that the stager in the pods reaches it: the input
// arrives at its path, the tricky argv entries reach the trainer through the staging wrapper,
// the checkpoints land under results/<job-name>/<job-uid>/, delete-artifacts removes them, and
// a failed upload fails the job.
func TestRealNodeStaging(t *testing.T) {
	n := realNode(t)
	if n.StagerImage == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("the real node has no stager image under CI=true")
		}
		t.Skip("the real node has no stager image (make stager-image)")
	}
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
			// Only rank 0 uploads: the keys carry no rank of kubectl-tao's own.
			prefix := "results/" + job + "/" + string(j.UID) + "/"
			want := []string{prefix + "results/rank-0/ckpt-000001", prefix + "results/rank-0/ckpt-000002"}
			if keys := srv.Keys(t, "results", "results/"+job+"/"); !slices.Equal(keys, want) {
				t.Fatalf("uploaded %q, want %q", keys, want)
			}
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
		// The bucket does not exist: the command succeeds, its results cannot be kept.
		submitRealEnv(t, srv.Env("no-such-bucket"), n, ns, "lost", []string{"--stager-image", n.StagerImage, "--output-path", "/results"},
			trainerPath, "--results", "/results", "--steps", "1")
		if err := pollErr(3*time.Minute, jobFinished(ns, "lost", batchv1.JobFailed)); err != nil {
			t.Fatalf("a job whose upload failed: %v\n%s", err, tao(t, nil, "logs", "lost", "-n", ns))
		}
		contains(t, tao(t, nil, "logs", "lost", "-n", ns), 0, "rank 0 done, exit code 0", "kubectl-tao: stage out failed")
	})
}
