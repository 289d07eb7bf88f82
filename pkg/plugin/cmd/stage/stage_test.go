package stage

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

// The supervisor runs in the test's own process here: it must not lower the test's priority.
func init() { yield = func() {} }

// TestMain gives the supervisor a temporary directory of the run's own: it writes its stacks'
// files and sitecustomize there.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "stage-test-")
	if err != nil {
		panic(err)
	}
	_ = os.Setenv("TMPDIR", dir)
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func run(env map[string]string, args ...string) (string, string, error) {
	var out, errOut bytes.Buffer
	cmd := NewCmd(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, func(k string) string { return env[k] })
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestInstallIsAtomicAndExecutable(t *testing.T) {
	src := filepath.Join(t.TempDir(), "self")
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho staged\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// An older copy is replaced.
	if err := os.WriteFile(filepath.Join(dir, "kubectl-tao"), []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	dest, err := Install(src, dir)
	if err != nil || dest != filepath.Join(dir, "kubectl-tao") {
		t.Fatalf("Install = %q, %v", dest, err)
	}
	fi, err := os.Stat(dest)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(dest); string(b) != "#!/bin/sh\necho staged\n" {
		t.Errorf("content %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 {
		t.Errorf("left %d entries; want only kubectl-tao, tao-mpi-agent and tao-mpi-ssh", len(entries))
	}
	// The MPI launchers' remote shells are the binary, by links relative to the directory.
	for _, name := range []string{"tao-mpi-agent", "tao-mpi-ssh"} {
		if target, err := os.Readlink(filepath.Join(dir, name)); err != nil || target != "kubectl-tao" {
			t.Errorf("%s links to %q, %v; want kubectl-tao", name, target, err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, name)); string(b) != "#!/bin/sh\necho staged\n" {
			t.Errorf("%s reads %q, want the binary", name, b)
		}
	}
	// Installed again, as a restarted init container does.
	if _, err := Install(src, dir); err != nil {
		t.Errorf("installing again: %v", err)
	}
	if _, err := Install(src, filepath.Join(dir, "missing")); err == nil {
		t.Error("installing into a missing directory succeeded")
	}
}

func TestInstallCommandCopiesTheRunningBinary(t *testing.T) {
	dir := t.TempDir()
	_, errOut, err := run(nil, "install", dir)
	if err != nil || !strings.Contains(errOut, "installed "+dir+"/kubectl-tao") {
		t.Fatalf("%v, %s", err, errOut)
	}
	self, _ := os.Executable()
	want, _ := os.ReadFile(self)
	got, _ := os.ReadFile(filepath.Join(dir, "kubectl-tao"))
	if !bytes.Equal(got, want) {
		t.Error("the installed file is not this binary")
	}
}

func TestMissingCredentialsAreNamed(t *testing.T) {
	env := map[string]string{"TAO_STAGE_INPUTS": "/data=s3://bucket/x", "SECRET_KEY": "s3cr3t"}
	_, _, err := run(env, "in")
	if err == nil || err.Error() != "S3 credentials incomplete: ACCESS_KEY not set in the environment" || exitcode.Of(err) != exitcode.Usage {
		t.Fatalf("in: %v", err)
	}
	env = map[string]string{"TAO_STAGE_OUTPUTS": "/results", "TAO_JOB_ID": "j", "TAO_JOB_UID": "u"}
	_, _, err = run(env, "out")
	if err == nil || !strings.Contains(err.Error(), "ACCESS_KEY, SECRET_KEY, S3_BUCKET_NAME not set") {
		t.Fatalf("out: %v", err)
	}
	env = map[string]string{"TAO_STAGE_OUTPUTS": "/results", "ACCESS_KEY": "a", "SECRET_KEY": "s", "S3_BUCKET_NAME": "bucket", "TAO_JOB_ID": "j"}
	_, _, err = run(env, "out")
	if err == nil || !strings.Contains(err.Error(), "TAO_JOB_UID name the results prefix") {
		t.Fatalf("out without a UID: %v", err)
	}
	_, _, err = run(map[string]string{"TAO_STAGE_INPUTS": "data=s3://bucket/x"}, "in")
	if err == nil || exitcode.Of(err) != exitcode.Usage || !strings.Contains(err.Error(), "TAO_STAGE_INPUTS") {
		t.Fatalf("bad input: %v", err)
	}
}

func TestNothingToDoNeedsNoCredentials(t *testing.T) {
	for _, sub := range []string{"in", "out"} {
		out, errOut, err := run(nil, sub)
		if err != nil || out != "" || errOut != "stage "+sub+": nothing to do\n" {
			t.Errorf("%s: %v, %q, %q", sub, err, out, errOut)
		}
	}
}

// out then in through the environment the pod has, against an in-process S3.
func TestOutThenIn(t *testing.T) {
	store := s3fake.Start(t, s3fake.Options{Bucket: "bucket"})
	env := store.Env()
	env["TAO_JOB_ID"], env["TAO_JOB_UID"] = "train", "0000-uid"
	root := t.TempDir()
	if err := os.MkdirAll(root+"/results/ckpt", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root+"/results/ckpt/model.pth", []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	env["TAO_STAGE_OUTPUTS"] = root + "/results\n" + root + "/never-written"
	out, errOut, err := run(env, "out")
	if err == nil || exitcode.Of(err) != exitcode.NotFound || !strings.Contains(err.Error(), root+"/never-written does not exist") {
		t.Fatalf("out: %v\n%s", err, errOut)
	}
	if out != "" || !strings.Contains(errOut, "model.pth -> s3://bucket/results/train/0000-uid"+root+"/results/ckpt/model.pth (7 B in ") {
		t.Fatalf("stdout %q\nstderr:\n%s", out, errOut)
	}
	// The flags replace the environment, for manual use.
	_, errOut, err = run(env, "in", "--input", root+"/back=s3://bucket/results/train/0000-uid"+root+"/results/")
	if err != nil {
		t.Fatalf("in: %v\n%s", err, errOut)
	}
	if b, _ := os.ReadFile(root + "/back/ckpt/model.pth"); string(b) != "weights" {
		t.Errorf("model.pth = %q", b)
	}
	if strings.Contains(errOut, store.SecretKey) {
		t.Error("the secret key was printed")
	}
}

// `stage run` passes the command's output and exit code through; what keeps the log from S3
// is a warning, never an error of the command; its own usage errors carry the staging code.
func TestStageRun(t *testing.T) {
	out, errOut, err := run(nil, "run", "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 4")
	if code, ok := exitcode.PassedThrough(err); !ok || code != 4 || out != "out\n" ||
		errOut != "kubectl-tao: log archive: off: S3 credentials incomplete: ACCESS_KEY, SECRET_KEY, S3_BUCKET_NAME not set in the environment\nerr\n" {
		t.Errorf("exit %v, stdout %q, stderr %q", err, out, errOut)
	}
	env := map[string]string{"ACCESS_KEY": "a", "SECRET_KEY": "s", "S3_BUCKET_NAME": "bucket", "S3_ENDPOINT_URL": "http://127.0.0.1:1",
		"TAO_JOB_ID": "train", "TAO_JOB_UID": "uid", "NODE_RANK": "x"}
	if _, errOut, err := run(env, "run", "--", "/bin/sh", "-c", "exit 0"); exitcode.Of(err) != 1 || !strings.Contains(errOut, `$NODE_RANK="x" is not a rank`) {
		t.Errorf("bad rank: %v, %q", err, errOut)
	}
	for _, args := range [][]string{{"run"}, {"run", "/bin/true"}, {"run", "--bogus", "--", "/bin/true"}, {"run", "--interval", "0s", "--", "/bin/true"}} {
		if _, _, err := run(nil, args...); exitcode.Of(err) != s3layout.ExitStageRun {
			t.Errorf("%q: %v (exit %d), want the staging code %d", args, err, exitcode.Of(err), s3layout.ExitStageRun)
		}
	}
}

// The rank's log lands at its archive key, against an in-process S3.
func TestStageRunArchivesTheRankLog(t *testing.T) {
	store := s3fake.Start(t, s3fake.Options{Bucket: "bucket"})
	env := store.Env()
	env["TAO_JOB_ID"], env["TAO_JOB_UID"], env["NODE_RANK"] = "train", "0000-uid", "1"
	out, errOut, err := run(env, "run", "--", "/bin/sh", "-c", "echo step 1; sleep 0.1; echo oops >&2; sleep 0.1; printf 'no newline'; exit 1")
	if code, _ := exitcode.PassedThrough(err); code != 1 || out != "step 1\nno newline" || errOut != "oops\n" {
		t.Fatalf("exit %v, stdout %q, stderr %q", err, out, errOut)
	}
	if got := store.Get("results/train/0000-uid/.kubectl-tao/logs/rank-1.log"); got != "step 1\noops\nno newline" {
		t.Errorf("archive %q", got)
	}
}
