package logs_test

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

// archiveS3 is an S3 holding the log archive of run job-uid of train (ranks 0, 1 and 10; rank
// 1's last line cut by the wrapper's last upload) and a file output beside it; it returns the
// shell's credentials for it.
func archiveS3(t *testing.T, extraRuns ...string) map[string]string {
	t.Helper()
	srv := s3fake.Start(t, s3fake.Options{Bucket: "results"})
	prefix, _ := s3layout.ResultsPrefix("train", "job-uid")
	srv.Put(s3layout.LogArchiveKey(prefix, 10, "train-10-xyz"), "ten a\nten b\n")
	// Rank 0 was retried: its first attempt failed, in a pod of its own. (Written in the order
	// of their pod names too: the fake S3 stamps writes to the second, and keys break ties.)
	srv.Put(s3layout.LogArchiveKey(prefix, 0, "train-0-aaa"), "zero failed\n")
	srv.Put(s3layout.LogArchiveKey(prefix, 0, "train-0-bbb"), "zero a\nzero b\nzero c\n")
	// Rank 1 as an archive of before attempts were kept apart: one object, no pod.
	srv.Put(s3layout.LogArchiveKey(prefix, 1, ""), "one a\none b (cut")
	srv.Put(prefix+"results/model.pth", "weights")
	for _, uid := range extraRuns {
		p, _ := s3layout.ResultsPrefix("train", uid)
		srv.Put(s3layout.LogArchiveKey(p, 0, "train-0-ccc"), "another run\n")
	}
	return srv.Env()
}

func runArchive(c cmdtest.Cmd, env map[string]string, args ...string) cmdtest.Result {
	c.NS, c.Env = "ns", env
	return c.Run(context.Background(), append([]string{"logs"}, args...)...)
}

func stagedTrain() *fixture.JobWrapper {
	return train().Condition(batchv1.JobFailed, "BackoffLimitExceeded", "").Annotation(s3layout.AnnotationOutputs, `["/results"]`).Annotation(s3layout.AnnotationS3Secret, "train-s3")
}

const archiveNote = "Reading the archived logs of job.batch/train (uid job-uid) from s3://results/results/train/job-uid/.kubectl-tao/logs/: "

func TestLogsFromTheArchiveWhenTheJobIsGone(t *testing.T) {
	env := archiveS3(t)
	c, _ := client()
	for _, tc := range []struct {
		args []string
		want string
	}{
		// Every attempt, oldest first, as logs prints the pods of a retried rank.
		{nil, "[rank 0] zero failed\n[rank 0] zero a\n[rank 0] zero b\n[rank 0] zero c\n[rank 1] one a\n[rank 1] one b (cut\n[rank 10] ten a\n[rank 10] ten b\n"},
		{[]string{"--rank", "10,1"}, "[rank 1] one a\n[rank 1] one b (cut\n[rank 10] ten a\n[rank 10] ten b\n"},
		{[]string{"--tail", "1"}, "[rank 0] zero failed\n[rank 0] zero c\n[rank 1] one b (cut\n[rank 10] ten b\n"},
		{[]string{"--tail", "0"}, ""},
		{[]string{"--no-prefix", "--rank", "0"}, "zero failed\nzero a\nzero b\nzero c\n"},
		{[]string{"--attempt", "2"}, "[rank 0] zero a\n[rank 0] zero b\n[rank 0] zero c\n"},
		{[]string{"--attempt", "1", "--rank", "0"}, "[rank 0] zero failed\n"},
		{[]string{"--prefix=pod", "--tail", "1"}, "[pod/train-0-aaa] zero failed\n[pod/train-0-bbb] zero c\n[rank 1] one b (cut\n[pod/train-10-xyz] ten b\n"},
	} {
		r := runArchive(cmdtest.Cmd{Client: c}, env, append([]string{"train"}, tc.args...)...)
		if r.Code != 0 || r.Stdout != tc.want || r.Stderr != archiveNote+"the Job is gone.\n" {
			t.Errorf("%v: exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", tc.args, r.Code, r.Stdout, tc.want, r.Stderr)
		}
	}
	if r := runArchive(cmdtest.Cmd{Client: c}, env, "train", "--rank", "3"); r.Code != 3 || !strings.Contains(r.Stderr, "no archived logs of rank [3] under s3://results/results/train/job-uid/.kubectl-tao/logs/") {
		t.Errorf("missing rank: exit %d %s", r.Code, r.Stderr)
	}
	if r := runArchive(cmdtest.Cmd{Client: c}, env, "train", "--attempt", "3"); r.Code != 3 || r.Stdout != "" || !strings.Contains(r.Stderr, "no archived log of attempt 3 under s3://") {
		t.Errorf("missing attempt: exit %d %s", r.Code, r.Stderr)
	}
	// Without credentials there is no archive to read: the Job is simply not found, as before.
	if r := runArchive(cmdtest.Cmd{Client: c}, nil, "train"); r.Code != 3 || r.Stdout != "" || !strings.Contains(r.Stderr, `not found in namespace "ns"`) {
		t.Errorf("no credentials: exit %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
}

func TestLogsFromTheArchiveWhenThePodsAreGone(t *testing.T) {
	env := archiveS3(t)
	sec := fixture.Secret("ns", "train-s3", env)
	c, _ := client(stagedTrain().Obj(), sec)
	r := runArchive(cmdtest.Cmd{Client: c}, nil, "train", "--rank", "0")
	if r.Code != 0 || r.Stdout != "[rank 0] zero failed\n[rank 0] zero a\n[rank 0] zero b\n[rank 0] zero c\n" || r.Stderr != archiveNote+"its pods are gone.\n" {
		t.Errorf("exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}

	// A job that was not staged has no archive: logs says what it always said.
	c, _ = client(train().Condition(batchv1.JobComplete, "", "").Obj())
	r = runArchive(cmdtest.Cmd{Client: c}, env, "train")
	if r.Code != 0 || r.Stdout != "" || r.Stderr != "job.batch/train has no pods yet\n" {
		t.Errorf("unstaged: exit %d %q %q", r.Code, r.Stdout, r.Stderr)
	}
}

func TestLogsFromArchiveWhilePodsExist(t *testing.T) {
	env := archiveS3(t, "uid-older")
	objs := []runtime.Object{stagedTrain().Obj(), fixture.RankPod(train().Obj(), 0).Running(time.Time{}).Obj()}
	c, _ := client(objs...)
	r := runArchive(cmdtest.Cmd{Client: c}, env, "train", "--from-archive", "--rank", "1")
	if r.Code != 0 || r.Stdout != "[rank 1] one a\n[rank 1] one b (cut\n" || r.Stderr != archiveNote+"as asked.\n" {
		t.Errorf("exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	// An attempt is read from the archive, where attempts are numbered, pods or not.
	r = runArchive(cmdtest.Cmd{Client: c}, env, "train", "--attempt", "1", "--rank", "10")
	if r.Code != 0 || r.Stdout != "[rank 10] ten a\n[rank 10] ten b\n" || r.Stderr != archiveNote+"as asked.\n" {
		t.Errorf("--attempt: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	// An earlier run of the name, by --uid.
	r = runArchive(cmdtest.Cmd{Client: c}, env, "train", "--uid", "uid-older")
	if r.Code != 0 || r.Stdout != "[rank 0] another run\n" {
		t.Errorf("--uid: exit %d\n%s\n%s", r.Code, r.Stdout, r.Stderr)
	}
	// The Job gone and two runs: which one is for the user to say.
	gone, _ := client()
	r = runArchive(cmdtest.Cmd{Client: gone}, env, "train", "--from-archive")
	if r.Code != 2 || !strings.Contains(r.Stderr, "has 2 runs under s3://results/results/train/: pick one with --uid") {
		t.Errorf("two runs: exit %d %s", r.Code, r.Stderr)
	}
	for _, args := range [][]string{
		{"train", "--from-archive", "-f"},
		{"train", "--uid", "x", "--timestamps"},
		{"train", "--attempt", "1", "-f"},
		{"train", "--attempt", "-1"},
		{"train", "--attempt", "0"},
		{"train", "--from-archive", "--container", "x"},
		{"train", "--uid", "a/b"},
	} {
		if r := runArchive(cmdtest.Cmd{Client: c}, env, args...); r.Code != 2 || r.Stdout != "" {
			t.Errorf("%v: exit %d %q %s", args, r.Code, r.Stdout, r.Stderr)
		}
	}
	// Attempts count from 1: an explicit 0 is refused, not read as "every attempt".
	if r := runArchive(cmdtest.Cmd{Client: c}, env, "train", "--attempt", "0"); !strings.Contains(r.Stderr, "--attempt must be 1 or more, got 0") {
		t.Errorf("--attempt 0: exit %d %s", r.Code, r.Stderr)
	}
}
