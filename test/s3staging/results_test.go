//go:build e2e

package s3staging

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin"
	"github.com/kubectl-tao/kubectl-tao/test/s3server"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fakefactory"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

// results runs `kubectl tao results` in-process against srv, for a Job that is gone (an empty
// cluster), with the shell's credentials in env.
func results(ctx context.Context, env map[string]string, args ...string) (int, string, string) {
	var out, errOut testbuf.Buffer
	code := plugin.Execute(ctx, plugin.Deps{
		Streams: genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
		Getenv:  func(k string) string { return env[k] },
		Factory: &fakefactory.Factory{Client: fake.NewClientset()},
	}, append([]string{"results"}, args...))
	return code, out.String(), errOut.String()
}

func shellEnv(srv *s3server.Server, bucket, secret string) map[string]string {
	return map[string]string{"ACCESS_KEY": srv.AccessKey, "SECRET_KEY": secret, "S3_BUCKET_NAME": bucket, "S3_ENDPOINT_URL": srv.Endpoint}
}

// A 1,500-object run is listed, its download interrupted and resumed: the second run fetches
// exactly what the first did not, and every file is whole.
func TestResultsDownloadInterruptedAndResumed(t *testing.T) {
	srv := s3server.Start(t)
	srv.MakeBucket(t, "results")
	const n = 1500
	body := func(i int) []byte { return []byte(strings.Repeat(fmt.Sprintf("%04d", i), 256+i%7)) }
	var wg sync.WaitGroup
	work := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				srv.Put(t, "results", fmt.Sprintf("results/train/uid-1/ckpt/%02d/f%04d.bin", i%20, i), body(i))
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	srv.Put(t, "results", "results/train/uid-0/old.txt", []byte("an earlier run"))
	env := shellEnv(srv, "results", srv.SecretKey)
	ctx := context.Background()

	code, out, errOut := results(ctx, env, "train", "--all-runs", "-o", "jsonpath={.runs[*].uid}")
	if code != 0 || out != "uid-0 uid-1" {
		t.Fatalf("--all-runs: exit %d %q %s", code, out, errOut)
	}
	code, _, errOut = results(ctx, env, "train")
	if code != 2 || !strings.Contains(errOut, "--uid uid-1  (1500 objects") {
		t.Fatalf("several runs: exit %d %s", code, errOut)
	}
	code, out, _ = results(ctx, env, "train", "--uid", "uid-1", "-o", "jsonpath={.objects[1499].key}")
	if code != 0 || out != "ckpt/19/f1499.bin" {
		t.Fatalf("listing: exit %d %q", code, out)
	}

	dir := filepath.Join(t.TempDir(), "dl")
	count := func() int {
		found := 0
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".bin") {
				found++
			}
			return nil
		})
		return found
	}
	// Interrupt the first download once a fifth of the files are in place.
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		defer cancel()
		for count() < n/5 {
			time.Sleep(5 * time.Millisecond)
		}
	}()
	code, _, errOut = results(cctx, env, "train", "--uid", "uid-1", "--download", dir)
	first := count()
	if code == 0 || first == 0 || first >= n || !strings.Contains(errOut, "run the command again to finish") {
		t.Fatalf("interrupted run: exit %d, %d files, %s", code, first, errOut)
	}
	code, out, errOut = results(ctx, env, "train", "--uid", "uid-1", "--download", dir, "-o", "json")
	var got struct{ Downloaded, Skipped int }
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("resumed run: exit %d %s %s", code, out, errOut)
	}
	if got.Skipped != first || got.Downloaded != n-first {
		t.Errorf("resumed run downloaded %d and skipped %d; %d were complete before it", got.Downloaded, got.Skipped, first)
	}
	for i := range n {
		b, err := os.ReadFile(filepath.Join(dir, "ckpt", fmt.Sprintf("%02d", i%20), fmt.Sprintf("f%04d.bin", i)))
		if err != nil || string(b) != string(body(i)) {
			t.Fatalf("file %d: %d bytes, %v", i, len(b), err)
		}
	}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".tao-part-") {
			t.Errorf("a temporary file is left: %s", p)
		}
		return nil
	})
}

// Rejected credentials are exit 6 (denied), with nothing written and no secret printed.
func TestResultsWrongCredentials(t *testing.T) {
	srv := s3server.Start(t)
	srv.MakeBucket(t, "results")
	srv.Put(t, "results", "results/train/uid-1/model.pth", []byte("weights"))
	dir := filepath.Join(t.TempDir(), "dl")
	code, out, errOut := results(context.Background(), shellEnv(srv, "results", "wrong-secret-key"), "train", "--download", dir)
	if code != 6 || out != "" || !strings.Contains(errOut, "S3 rejected the credentials") {
		t.Errorf("exit %d, stdout %q, stderr %s", code, out, errOut)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s was made: %v", dir, err)
	}
	if leaks := srv.Leaks(out, errOut); len(leaks) > 0 {
		t.Errorf("printed a secret")
	}
}
