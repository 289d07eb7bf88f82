package logs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

// savedAs reports (as an error) how dir differs from want, file names to contents.
func savedAs(dir string, want map[string]string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(ents) != len(want) {
		return fmt.Errorf("%d files, want %d", len(ents), len(want))
	}
	for name, body := range want {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != body {
			return fmt.Errorf("%s: %q, %v; want %q", name, b, err, body)
		}
	}
	return nil
}

func TestLogsSaveFromPods(t *testing.T) {
	c, _ := client(train().Obj(), fixture.RankPod(train().Obj(), 1).Running(time.Time{}).Obj(), fixture.RankPod(train().Obj(), 0).Running(time.Time{}).Obj())
	dir := filepath.Join(t.TempDir(), "saved")
	// --prefix=pod does not reach the files: they hold the lines alone.
	r := run(t, c, "train", "--save", dir, "--prefix=pod")
	want := map[string]string{"rank-0.log": "step 1\nstep 2\n", "rank-1.log": "step 1\nstep 2\n"}
	if r.Code != 0 || r.Stdout != "" || r.Stderr != "Saved 4 lines of 2 ranks in "+dir+" (rank-<N>.log).\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	if err := savedAs(dir, want); err != nil {
		t.Error(err)
	}
}

// From the archive, once the Job is gone: a rank with one archived attempt has its file, what
// logs prints for it; a retried rank has a file per attempt, each what --attempt A prints for
// it; with --attempt, the files say which attempt they hold.
func TestLogsSaveFromTheArchive(t *testing.T) {
	env := archiveS3(t)
	c, _ := client()
	dir := t.TempDir()
	r := runArchive(cmdtest.Cmd{Client: c}, env, "train", "--save", dir)
	want := map[string]string{"rank-0.attempt-1.log": "zero failed\n", "rank-0.attempt-2.log": "zero a\nzero b\nzero c\n",
		"rank-1.log": "one a\none b (cut\n", "rank-10.log": "ten a\nten b\n"}
	if r.Code != 0 || r.Stdout != "" || !strings.HasSuffix(r.Stderr, "Saved 8 lines of 3 ranks in "+dir+
		" (rank-<N>.log; rank 0 had 2 attempts: rank-0.attempt-1.log, rank-0.attempt-2.log).\n") {
		t.Errorf("exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	if err := savedAs(dir, want); err != nil {
		t.Error(err)
	}
	for file, args := range map[string][]string{
		"rank-1.log": {"--rank", "1"}, "rank-0.attempt-1.log": {"--rank", "0", "--attempt", "1"}, "rank-0.attempt-2.log": {"--rank", "0", "--attempt", "2"},
	} {
		p := runArchive(cmdtest.Cmd{Client: c}, env, append([]string{"train", "--no-prefix"}, args...)...)
		if p.Stdout != want[file] {
			t.Errorf("%v: printed %q, saved %q in %s", args, p.Stdout, want[file], file)
		}
	}

	dir = t.TempDir()
	r = runArchive(cmdtest.Cmd{Client: c}, env, "train", "--save", dir, "--attempt", "1", "--rank", "0,10")
	want = map[string]string{"rank-0.attempt-1.log": "zero failed\n", "rank-10.attempt-1.log": "ten a\nten b\n"}
	if err := savedAs(dir, want); r.Code != 0 || err != nil {
		t.Errorf("--attempt 1: exit %d %s: %v", r.Code, r.Stderr, err)
	}

	// A rank that is not there: an error, and nothing saved.
	dir = filepath.Join(t.TempDir(), "new")
	r = runArchive(cmdtest.Cmd{Client: c}, env, "train", "--save", dir, "--rank", "7")
	if _, err := os.Stat(dir); r.Code != 3 || !os.IsNotExist(err) {
		t.Errorf("missing rank: exit %d %s; the directory: %v", r.Code, r.Stderr, err)
	}
}

func TestLogsSaveBadDir(t *testing.T) {
	c, reqs := client(train().Obj(), fixture.RankPod(train().Obj(), 0).Running(time.Time{}).Obj())
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir  string
		code int
		msg  string
	}{
		{file, 2, "--save " + file + ": not a directory"},
		{filepath.Join(file, "sub"), 1, "--save: mkdir " + file + ": not a directory"},
	} {
		r := run(t, c, "train", "--save", tc.dir)
		if r.Code != tc.code || r.Stdout != "" || !strings.Contains(r.Stderr, tc.msg) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", tc.dir, r.Code, r.Stdout, r.Stderr)
		}
	}
	if len(*reqs) != 0 {
		t.Errorf("logs were read for a directory that cannot hold them: %v", *reqs)
	}
	if b, _ := os.ReadFile(file); string(b) != "x" {
		t.Errorf("the file became %q", b)
	}
}
