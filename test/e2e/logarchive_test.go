//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobpods"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/test/s3server"
)

// TestLogArchiveOfARetriedRank, on the simulated cluster (its pods run nothing, so the archive a
// real pod's wrapper would upload is put in the S3 test server by hand): a staged job that
// failed, rank 0 tried twice, its pods gone. logs reads both attempts in order, --attempt one,
// --save writes the rank's file; diagnose finds the CUDA OOM in the last attempt's archived
// lines; results lists both attempts; delete-artifacts removes them.
func TestLogArchiveOfARetriedRank(t *testing.T) {
	t.Parallel()
	ns, srv, job := failedStagedJob(t, "oomed")
	prefix, _ := s3layout.ResultsPrefix("oomed", string(job.UID))
	first, second := s3layout.LogArchiveKey(prefix, 0, "oomed-first"), s3layout.LogArchiveKey(prefix, 0, "oomed-second")
	oom := "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
	srv.Put(t, "results", first, []byte("epoch 1\nNCCL WARN peer lost\n"))
	// The attempts are told apart by their last write: S3 stamps it to the second.
	time.Sleep(1100 * time.Millisecond)
	srv.Put(t, "results", second, []byte("epoch 1\nepoch 2\n"+oom+"\n"))

	// Pods gone (GC'd, or a lost node), the Job still there.
	ctx := context.Background()
	if err := client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)},
		metav1.ListOptions{LabelSelector: jobpods.Selector("oomed")}); err != nil {
		t.Fatal(err)
	}
	if err := pollErr(time.Minute, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: jobpods.Selector("oomed")})
		return err == nil && len(pods.Items) == 0, err
	}); err != nil {
		t.Fatal(err)
	}

	r := tao(t, nil, "logs", "oomed", "-n", ns)
	want := "[rank 0] epoch 1\n[rank 0] NCCL WARN peer lost\n[rank 0] epoch 1\n[rank 0] epoch 2\n[rank 0] " + oom + "\n"
	if r.code != 0 || r.stdout != want || !strings.HasSuffix(r.stderr, ": its pods are gone.\n") {
		t.Fatalf("logs: %s\nwant stdout:\n%s", r, want)
	}
	r = tao(t, nil, "logs", "oomed", "-n", ns, "--attempt", "1", "--prefix=pod")
	if r.code != 0 || r.stdout != "[pod/oomed-first] epoch 1\n[pod/oomed-first] NCCL WARN peer lost\n" {
		t.Fatalf("logs --attempt 1: %s", r)
	}
	// A file per attempt of the retried rank, each what --attempt A prints of it.
	dir := filepath.Join(t.TempDir(), "saved")
	r = tao(t, nil, "logs", "oomed", "-n", ns, "--save", dir)
	if r.code != 0 || r.stdout != "" || !strings.HasSuffix(r.stderr, "Saved 5 lines of 1 rank in "+dir+
		" (rank 0 had 2 attempts: rank-0.attempt-1.log, rank-0.attempt-2.log).\n") {
		t.Fatalf("logs --save: %s", r)
	}
	assertFiles(t, dir, map[string]string{"rank-0.attempt-1.log": "epoch 1\nNCCL WARN peer lost\n", "rank-0.attempt-2.log": "epoch 1\nepoch 2\n" + oom + "\n"})

	contains(t, tao(t, nil, "diagnose", "oomed", "-n", ns), 0, "What happened: rank 0: CUDAOutOfMemory (the archived log says: "+oom+")",
		"Where first:   pod oomed-second", "the log findings come from the archived logs in s3://results/"+prefix)
	contains(t, tao(t, nil, "results", "oomed", "-n", ns), 0, ".kubectl-tao/logs/rank-0.oomed-first.log", ".kubectl-tao/logs/rank-0.oomed-second.log")
	contains(t, tao(t, nil, "delete-artifacts", "oomed", "-n", ns), 0, "job.batch/oomed deleted; 2 objects")
	if keys := srv.Keys(t, "results", prefix); len(keys) != 0 {
		t.Errorf("left after delete-artifacts: %q", keys)
	}
}

// TestLogArchiveOfADeletedJob, on the simulated cluster (the archive put in the S3 test server by
// hand, as above): after `kubectl delete job`, its Secret gone with it, diagnose finds the run in
// S3 (the only run of the name, or --uid) and reports the CUDA OOM its archive holds, from the
// archive alone; -o json says so; without credentials, or with a --uid that has no archive, the
// Job is not found (exit 3).
func TestLogArchiveOfADeletedJob(t *testing.T) {
	t.Parallel()
	ns, srv, job := failedStagedJob(t, "deleted")
	uid := string(job.UID)
	prefix, _ := s3layout.ResultsPrefix("deleted", uid)
	oom := "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
	srv.Put(t, "results", s3layout.LogArchiveKey(prefix, 1, "deleted-1-aaa"), []byte("epoch 1\n"+oom+"\n"))
	// Rank 0 stops later, on the NCCL timeout rank 1's death causes: S3 stamps writes to the second.
	time.Sleep(1100 * time.Millisecond)
	srv.Put(t, "results", s3layout.LogArchiveKey(prefix, 0, "deleted-0-aaa"), []byte("epoch 1\nNCCL WARN peer lost\n"))

	ctx := context.Background()
	fg := metav1.DeletePropagationForeground
	if err := client.BatchV1().Jobs(ns).Delete(ctx, "deleted", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	if err := pollErr(time.Minute, func(ctx context.Context) (bool, error) {
		_, err := client.BatchV1().Jobs(ns).Get(ctx, "deleted", metav1.GetOptions{})
		return apierrors.IsNotFound(err), ignoreNotFound(err)
	}); err != nil {
		t.Fatal(err)
	}

	// The Job's Secret is no source any more: without the shell's credentials, not found, and how.
	contains(t, tao(t, nil, "diagnose", "deleted", "-n", ns), 3, `job "deleted" not found in namespace "`+ns+`"`, "or name a Secret with --s3-secret")
	env := srv.Env("results")
	for _, args := range [][]string{{"diagnose", "deleted", "-n", ns}, {"diagnose", "deleted", "-n", ns, "--uid", uid}} {
		r := tao(t, env, args...)
		contains(t, r, 0, "Job deleted in namespace "+ns+" is gone: this is the diagnosis of run "+uid+" from its log archive alone, with no Job, pod or event evidence left.",
			"What happened: rank 1: CUDAOutOfMemory (the archived log says: "+oom+")", "Where first:   pod deleted-1-aaa",
			"Rank 1 stopped first", "[rank 0] pod deleted-0-aaa", "    NCCL WARN peer lost")
		if r.stderr != "" {
			t.Errorf("%v: stderr %q", args, r.stderr)
		}
	}
	r := tao(t, env, "diagnose", "deleted", "-n", ns, "-o", "json")
	var got struct {
		ErrClass     *string `json:"err_class"`
		FirstFailure *struct {
			Name string `json:"node_event_name"`
			Rank int    `json:"rank"`
		} `json:"first_failure"`
		Archive *struct {
			UID     string `json:"uid"`
			JobGone bool   `json:"job_gone"`
			Ranks   []struct {
				Rank  int      `json:"rank"`
				Lines []string `json:"last_lines"`
			} `json:"ranks"`
		} `json:"archive"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 {
		t.Fatalf("-o json: %v\n%s", err, r)
	}
	if got.ErrClass == nil || *got.ErrClass != "ERR_PROGRAM" || got.FirstFailure == nil || got.FirstFailure.Name != "CUDAOutOfMemory" || got.FirstFailure.Rank != 1 ||
		got.Archive == nil || got.Archive.UID != uid || !got.Archive.JobGone || len(got.Archive.Ranks) != 2 || !slices.Contains(got.Archive.Ranks[1].Lines, oom) {
		t.Errorf("-o json: %s", r.stdout)
	}
	contains(t, tao(t, env, "diagnose", "deleted", "-n", ns, "--uid", "0c9e1d7a-0000-4000-8000-000000000000"), 3,
		"no archived logs under s3://results/results/deleted/0c9e1d7a-0000-4000-8000-000000000000/")
	if leaks := srv.Leaks(r.stdout, r.stderr); len(leaks) > 0 {
		t.Errorf("credentials in the output: %q", leaks)
	}
}

// failedStagedJob makes, in a namespace of its own, a staged Job name against an S3 test server
// with a bucket "results", and waits until it failed, for the test to archive logs by hand.
func failedStagedJob(t *testing.T, name string) (string, *s3server.Server, *batchv1.Job) {
	t.Helper()
	ns := namespace(t)
	srv := s3server.Start(t)
	srv.MakeBucket(t, "results")
	job := srv.StagedJob(t, client, ns, name, "exit", "results")
	if err := pollErr(2*time.Minute, jobCondition(ns, name, batchv1.JobFailed)); err != nil {
		t.Fatal(err)
	}
	return ns, srv, job
}

// assertFiles checks that dir holds exactly the files of want, names to contents.
func assertFiles(t *testing.T, dir string, want map[string]string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		got[e.Name()] = string(b)
	}
	if !maps.Equal(got, want) {
		t.Errorf("%s holds %q, want %q", dir, got, want)
	}
}
