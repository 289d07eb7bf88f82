//go:build e2e

// Package s3staging tests S3 staging against a real S3 server (versitygw on loopback, which
// checks signatures): the S3 client package in-process, and the built binary's `stage in/out`
// as the pod's wrapper runs them. No Kubernetes cluster is needed.
package s3staging

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/s3server"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

// binary is $KUBECTL_TAO, or a build of ./cmd/kubectl-tao made for this run.
var binary string

func TestMain(m *testing.M) {
	binary = os.Getenv("KUBECTL_TAO")
	if binary == "" {
		dir, err := os.MkdirTemp("", "staging-e2e-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		binary = filepath.Join(dir, "kubectl-tao")
		build := exec.Command("go", "build", "-o", binary, "../../cmd/kubectl-tao")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building kubectl-tao:", err)
			os.Exit(1)
		}
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func stager(t *testing.T, srv *s3server.Server, secret string, log *testbuf.Buffer) *s3.Stager {
	t.Helper()
	c, err := s3.NewClient(s3.Config{AccessKey: srv.AccessKey, SecretKey: secret, Endpoint: srv.Endpoint}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &s3.Stager{Client: c, Log: log, Backoff: 10 * time.Millisecond}
}

func mustInput(t *testing.T, s string) s3layout.Input {
	t.Helper()
	in, err := s3layout.ParseInput(s)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func files(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		out[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestStageInFileAndPrefix(t *testing.T) {
	srv := s3server.Start(t)
	srv.MakeBucket(t, "datasets")
	big := bytes.Repeat([]byte("tao!"), 5<<20) // 20 MiB: a multipart-sized object
	srv.Put(t, "datasets", "coco/train/images/0001.jpg", big)
	srv.Put(t, "datasets", "coco/train/labels/0001.json", []byte(`{"boxes":[]}`))
	srv.Put(t, "datasets", "coco/train-extra/x", []byte("not below coco/train/"))
	srv.Put(t, "datasets", "specs/train.yaml", []byte("epochs: 1\n"))
	srv.Put(t, "datasets", "coco/train/empty.txt", nil)

	root := t.TempDir()
	var log testbuf.Buffer
	err := stager(t, srv, srv.SecretKey, &log).Download(context.Background(), []s3layout.Input{
		mustInput(t, root+"/data/train=s3://datasets/coco/train/"),
		mustInput(t, root+"/specs/train.yaml=s3://datasets/specs/train.yaml"),
	})
	if err != nil {
		t.Fatalf("Download: %v\n%s", err, log.String())
	}
	got := files(t, root)
	if len(got) != 4 || got["data/train/empty.txt"] != "" || got["data/train/images/0001.jpg"] != string(big) || got["data/train/labels/0001.json"] != `{"boxes":[]}` ||
		got["specs/train.yaml"] != "epochs: 1\n" {
		keys := make([]string, 0, len(got))
		for k := range got {
			keys = append(keys, k)
		}
		t.Fatalf("files %v", keys)
	}
	if !strings.Contains(log.String(), "s3://datasets/coco/train/images/0001.jpg -> "+root+"/data/train/images/0001.jpg (20.0 MiB in ") ||
		!strings.Contains(log.String(), "(20.0 MiB in ") {
		t.Errorf("log:\n%s", log.String())
	}
	t.Logf("log:\n%s", log.String())
}

func TestStageOutTreeAndFile(t *testing.T) {
	srv := s3server.Start(t)
	srv.MakeBucket(t, "results")
	root := t.TempDir()
	tree := map[string]string{
		"results/model.pth":          strings.Repeat("w", 3<<20),
		"results/logs/status.json":   `{"epoch": 3}`,
		"results/logs/deep/er/x.txt": "x",
		"results/with space & ü.txt": "unicode",
		"results/experiment.yaml":    "a: 1",
		"results/empty/.keep":        "",
	}
	for rel, data := range tree {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "summary.txt"), []byte("done"), 0o644); err != nil {
		t.Fatal(err)
	}
	var log testbuf.Buffer
	run := s3.Run{Bucket: "results", JobID: "train-1", JobUID: "6b0e3f1c-uid"}
	err := stager(t, srv, srv.SecretKey, &log).Upload(context.Background(), run, []string{root + "/results", root + "/summary.txt"})
	if err != nil {
		t.Fatalf("Upload: %v\n%s", err, log.String())
	}
	prefix := "results/train-1/6b0e3f1c-uid" + root
	var want []string
	for rel, data := range tree {
		want = append(want, prefix+"/"+rel)
		if got := string(srv.Get(t, "results", prefix+"/"+rel)); got != data {
			t.Errorf("%s: %d bytes, want %d", rel, len(got), len(data))
		}
	}
	want = append(want, prefix+"/summary.txt")
	sort.Strings(want)
	if got := srv.Keys(t, "results", "results/"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("keys:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestWrongSecretKey(t *testing.T) {
	srv := s3server.Start(t)
	srv.MakeBucket(t, "datasets")
	srv.Put(t, "datasets", "a.txt", []byte("a"))
	root := t.TempDir()
	var log testbuf.Buffer
	s := stager(t, srv, "not-the-secret", &log)
	err := s.Download(context.Background(), []s3layout.Input{mustInput(t, root+"/a.txt=s3://datasets/a.txt")})
	if err == nil || exitcode.Of(err) != exitcode.Forbidden ||
		!strings.Contains(err.Error(), "s3://datasets/a.txt: S3 rejected the credentials (SignatureDoesNotMatch): check ACCESS_KEY and SECRET_KEY") {
		t.Fatalf("err = %v (code %d)", err, exitcode.Of(err))
	}
	if len(files(t, root)) != 0 {
		t.Error("a failed download left files")
	}
	// An unknown access key is named as such.
	c, _ := s3.NewClient(s3.Config{AccessKey: "AKIAUNKNOWN", SecretKey: srv.SecretKey, Endpoint: srv.Endpoint}, nil)
	_, err = s3.List(context.Background(), c, "datasets", "")
	if err = s3.Describe(err, "listing", "s3://datasets/"); !strings.Contains(fmt.Sprint(err), "S3 rejected the credentials (") {
		t.Errorf("unknown access key: %v", err)
	}
}

func TestMissingObjectIsNamed(t *testing.T) {
	srv := s3server.Start(t)
	srv.MakeBucket(t, "datasets")
	root := t.TempDir()
	var log testbuf.Buffer
	err := stager(t, srv, srv.SecretKey, &log).Download(context.Background(), []s3layout.Input{
		mustInput(t, root+"/a.txt=s3://datasets/no/such/key.txt"),
		mustInput(t, root+"/b=s3://no-such-bucket/x"),
	})
	if err == nil || exitcode.Of(err) != exitcode.NotFound ||
		!strings.Contains(err.Error(), "s3://datasets/no/such/key.txt: no such object (404 NoSuchKey)") ||
		!strings.Contains(err.Error(), "s3://no-such-bucket/x: the bucket does not exist (404 NoSuchBucket)") {
		t.Fatalf("err = %v", err)
	}
	if len(files(t, root)) != 0 {
		t.Error("a failed download left files")
	}
}

// Cleanup of one run's 1,500 objects leaves the other runs of the same name and the other jobs.
func TestDeletePrefix1500(t *testing.T) {
	srv := s3server.Start(t)
	srv.MakeBucket(t, "results")
	const n = 1500
	start := time.Now()
	putMany(t, srv, "results", "results/train/uid-a/", n)
	srv.Put(t, "results", "results/train/uid-b/model.pth", []byte("sibling run"))
	srv.Put(t, "results", "results/train/uid-a-2/model.pth", []byte("a UID that extends this one"))
	srv.Put(t, "results", "results/train-2/uid-a/model.pth", []byte("another job"))
	t.Logf("put %d objects in %s", n+3, time.Since(start).Round(time.Millisecond))

	c, _ := s3.NewClient(s3.Config{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Endpoint: srv.Endpoint}, nil)
	prefix, err := s3layout.ResultsPrefix("train", "uid-a")
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	rm, err := s3.DeletePrefix(context.Background(), c, "results", prefix)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("MEASURED: deleted %d objects (%s) under %s in %s", rm.Objects, s3.HumanBytes(rm.Bytes), prefix, took.Round(time.Millisecond))
	if rm.Objects != n || rm.Bytes != int64(n*len("object-0000")) {
		t.Errorf("removed %+v", rm)
	}
	want := "results/train-2/uid-a/model.pth results/train/uid-a-2/model.pth results/train/uid-b/model.pth"
	if got := strings.Join(srv.Keys(t, "results", "results/"), " "); got != want {
		t.Errorf("left %s", got)
	}
}

func putMany(t *testing.T, srv *s3server.Server, bucket, prefix string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			data := fmt.Sprintf("object-%04d", i)
			key := fmt.Sprintf("%sresults/ckpt/%02d/%04d.bin", prefix, i%20, i)
			_, err := srv.Client.PutObject(context.Background(), bucket, key, strings.NewReader(data), int64(len(data)), minio.PutObjectOptions{})
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// The built binary, run as the pod's wrapper runs it: credentials and paths in the environment.
func TestBinaryStageOutThenIn(t *testing.T) {
	srv := s3server.Start(t)
	srv.MakeBucket(t, "bucket")
	root := t.TempDir()
	if err := os.MkdirAll(root+"/results/ckpt", 0o755); err != nil {
		t.Fatal(err)
	}
	for rel, data := range map[string]string{"results/ckpt/model.pth": "weights", "results/log.txt": "loss 0.1"} {
		if err := os.WriteFile(filepath.Join(root, rel), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := append(srv.Env("bucket"), "TAO_JOB_ID=train", "TAO_JOB_UID=uid-9",
		"TAO_STAGE_OUTPUTS="+root+"/results\n"+root+"/missing")
	code, out, errOut := runBinary(t, env, "stage", "out")
	// The missing output fails the run (exit 3, named on stderr), the others are uploaded.
	if code != int(exitcode.NotFound) || out != "" || !strings.Contains(errOut, "output "+root+"/missing does not exist") ||
		!strings.Contains(errOut, "stage out: 1 of 2 outputs uploaded to s3://bucket/results/train/uid-9/; 2 files") {
		t.Fatalf("stage out: exit %d\nstdout %q\nstderr:\n%s", code, out, errOut)
	}
	if got := string(srv.Get(t, "bucket", "results/train/uid-9"+root+"/results/ckpt/model.pth")); got != "weights" {
		t.Errorf("model.pth = %q", got)
	}
	leaks := srv.Leaks(out, errOut)

	back := t.TempDir()
	env = append(srv.Env("bucket"), "TAO_STAGE_INPUTS="+back+"/results=s3://bucket/results/train/uid-9"+root+"/results/\n"+
		back+"/log.txt=s3://bucket/results/train/uid-9"+root+"/results/log.txt")
	code, out, errOut = runBinary(t, env, "stage", "in")
	if code != 0 || out != "" {
		t.Fatalf("stage in: exit %d\nstdout %q\nstderr:\n%s", code, out, errOut)
	}
	got := files(t, back)
	if got["results/ckpt/model.pth"] != "weights" || got["results/log.txt"] != "loss 0.1" || got["log.txt"] != "loss 0.1" || len(got) != 3 {
		t.Errorf("files %v", got)
	}
	leaks = append(leaks, srv.Leaks(out, errOut)...)

	// A wrong secret: a clear error, exit 6, and still no secret in the output.
	env = []string{"ACCESS_KEY=" + srv.AccessKey, "SECRET_KEY=wrong-" + srv.SecretKey, "S3_ENDPOINT_URL=" + srv.Endpoint,
		"TAO_STAGE_INPUTS=" + back + "/x=s3://bucket/results/train/uid-9" + root + "/results/log.txt"}
	code, out, errOut = runBinary(t, env, "stage", "in")
	if code != int(exitcode.Forbidden) || !strings.Contains(errOut, "S3 rejected the credentials (SignatureDoesNotMatch)") {
		t.Fatalf("wrong secret: exit %d\n%s", code, errOut)
	}
	leaks = append(leaks, srv.Leaks(out, errOut)...)
	if len(leaks) > 0 {
		t.Errorf("the output shows %d secret values", len(leaks))
	}

	// Missing credentials are named.
	code, _, errOut = runBinary(t, []string{"TAO_STAGE_INPUTS=/x=s3://bucket/k"}, "stage", "in")
	if code != int(exitcode.Usage) || !strings.Contains(errOut, "ACCESS_KEY, SECRET_KEY not set in the environment") {
		t.Fatalf("missing credentials: exit %d\n%s", code, errOut)
	}
}

func runBinary(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	r := runWrapper(t, env, append([]string{binary}, args...), nil)
	return r.code, r.stdout, r.stderr
}
