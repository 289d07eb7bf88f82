package checkpoint

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"golang.org/x/sys/unix"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

const prefix = "results/train/uid-1/"

var base = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// write writes a file below dir with its modification time minute minutes after base.
func write(t *testing.T, dir, rel, body string, minute int) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	mt := base.Add(time.Duration(minute) * time.Minute)
	if err := os.Chtimes(p, mt, mt); err != nil {
		t.Fatal(err)
	}
}

func target(s *s3fake.Server, rank int, dir string) Target {
	return Target{Client: s.Client, Bucket: s.Bucket, ResultsPrefix: prefix, Rank: rank, Dir: dir}
}

func manifest(t *testing.T, s *s3fake.Server, rank int) []string {
	t.Helper()
	m, err := s3layout.ParseManifest(prefix, rank, []byte(s.Get(s3layout.CheckpointManifestKey(prefix, rank))))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, f := range m.Files {
		out = append(out, f.Path)
	}
	return out
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// Flush uploads every file, keeps the newest two checkpoints and every other file, and writes
// the manifest after the files; a restore on another rank brings back the union, with write
// times, and names rank 0's newest checkpoint.
func TestFlushRetentionAndRestore(t *testing.T) {
	s := s3fake.Start(t, s3fake.Options{})
	ctx := context.Background()
	dir0, dir1 := t.TempDir(), t.TempDir()
	for i, name := range []string{"e1.pth", "e2.pth", "e3.pth", "e4.pth"} {
		write(t, dir0, name, "model "+name, i+1)
	}
	write(t, dir0, "train.log", "log", 9)
	write(t, dir0, "shared.yaml", "rank 0's", 9)
	write(t, dir1, "opt/shard-1.pt", "shard 1", 3)
	write(t, dir1, "shared.yaml", "rank 1's", 2)
	var log testbuf.Buffer
	u0 := &Uploader{Target: target(s, 0, dir0), NoInotify: true, Log: &log}
	u1 := &Uploader{Target: target(s, 1, dir1), NoInotify: true, Log: &log}
	if err := u0.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := u1.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := manifest(t, s, 0), []string{"e3.pth", "e4.pth", "shared.yaml", "train.log"}; !reflect.DeepEqual(got, want) {
		t.Errorf("rank 0 manifest = %q; want %q", got, want)
	}
	files0 := s3layout.CheckpointFilesPrefix(prefix, 0)
	if got := s.Keys(files0); !reflect.DeepEqual(got, []string{files0 + "e3.pth", files0 + "e4.pth", files0 + "shared.yaml", files0 + "train.log"}) {
		t.Errorf("rank 0 objects after retention = %q", got)
	}
	// A file put in S3 with no manifest entry (an upload the pod died in) is never restored.
	s.Put(files0+"e9.pth", "partial")

	fresh := t.TempDir()
	r, err := Restore(ctx, target(s, 1, fresh), &log)
	if err != nil {
		t.Fatal(err)
	}
	if r.Files != 5 || r.Resume != filepath.Join(fresh, "e4.pth") || len(r.Own.Files) != 2 {
		t.Errorf("Restore = %+v", r)
	}
	for rel, want := range map[string]string{"e4.pth": "model e4.pth", "shared.yaml": "rank 1's", "opt/shard-1.pt": "shard 1", "train.log": "log"} {
		p := filepath.Join(fresh, filepath.FromSlash(rel))
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", rel, b, err, want)
		}
	}
	if info, err := os.Stat(filepath.Join(fresh, "e4.pth")); err != nil || !info.ModTime().Equal(base.Add(4*time.Minute)) {
		t.Errorf("restored e4.pth mtime = %v, %v", info.ModTime(), err)
	}
	if _, err := os.Stat(filepath.Join(fresh, "e9.pth")); !os.IsNotExist(err) {
		t.Errorf("a file no manifest names was restored: %v", err)
	}
	if !strings.Contains(log.String(), "restored 3 complete units, 5 files") || !strings.Contains(log.String(), "resume checkpoint: "+filepath.Join(fresh, "e4.pth")) {
		t.Errorf("log:\n%s", log.String())
	}

	// The next attempt's uploader continues the manifest: what the restore placed is not sent
	// again, neither rank 1's own files nor rank 0's (a DDP job saves on rank 0 only: rank 1
	// holds no copy of them); a file the command writes is.
	var puts atomic.Int32
	u := &Uploader{Target: target(s, 1, fresh), NoInotify: true, Own: r.Own, Placed: r.Placed, Log: &log}
	u.Client = countPuts(t, s, &puts)
	if err := u.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := puts.Load(); n != 0 {
		t.Errorf("%d PUTs after a restore with nothing written; want 0", n)
	}
	write(t, fresh, "e5.pth", "rank 1 wrote this", 10)
	if err := u.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := puts.Load(); n != 2 {
		t.Errorf("%d PUTs for one file written; want 2 (the file, the manifest)", n)
	}
	if got, want := manifest(t, s, 1), []string{"e5.pth", "opt/shard-1.pt", "shared.yaml"}; !reflect.DeepEqual(got, want) {
		t.Errorf("rank 1 manifest = %q; want %q (none of rank 0's files)", got, want)
	}
	if files, bytes := u.Sent(); files != 1 || bytes != int64(len("rank 1 wrote this")) {
		t.Errorf("Sent = %d files, %d bytes", files, bytes)
	}
}

// countPuts is a client of s that counts its PUT requests.
func countPuts(t *testing.T, s *s3fake.Server, n *atomic.Int32) *minio.Client {
	t.Helper()
	c, err := minio.New(strings.TrimPrefix(s.Endpoint, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), BucketLookup: minio.BucketLookupPath,
		Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPut {
				n.Add(1)
			}
			return http.DefaultTransport.RoundTrip(r)
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestRestoreErrors(t *testing.T) {
	ctx := context.Background()
	// Rejected credentials: a final error, S3's, with the code of a denial.
	s := s3fake.Start(t, s3fake.Options{Wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet {
				h.ServeHTTP(w, r) // the test's own bucket
				return
			}
			s3fake.WriteError(w, http.StatusForbidden, "InvalidAccessKeyId")
		})
	}})
	_, err := Restore(ctx, target(s, 0, t.TempDir()), nil)
	if err == nil || exitcode.Of(err) != exitcode.Forbidden || !strings.Contains(err.Error(), "checkpoint restore") || strings.Contains(err.Error(), s.SecretKey) {
		t.Errorf("bad credentials: %v (code %d)", err, exitcode.Of(err))
	}
	// A manifest that does not parse is named.
	s = s3fake.Start(t, s3fake.Options{})
	s.Put(s3layout.CheckpointManifestKey(prefix, 1), `{"version":7,"rank":1,"files":[]}`)
	if _, err := Restore(ctx, target(s, 0, t.TempDir()), nil); err == nil || !strings.Contains(err.Error(), "manifest.json") || !strings.Contains(err.Error(), "version 7") {
		t.Errorf("bad manifest: %v", err)
	}
	// A first attempt: nothing to restore, no resume checkpoint.
	s = s3fake.Start(t, s3fake.Options{})
	r, err := Restore(ctx, target(s, 0, filepath.Join(t.TempDir(), "new")), nil)
	if err != nil || r.Files != 0 || r.Resume != "" || r.Own.Rank != 0 || r.Own.Files == nil {
		t.Errorf("first attempt: %+v, %v", r, err)
	}
}

// Without inotify (or out of instances) a scan finds the files once unchanged for Settle.
func TestUploaderScans(t *testing.T) {
	for name, noInotify := range map[string]bool{"NoInotify": true, "out of instances": false} {
		t.Run(name, func(t *testing.T) {
			if !noInotify {
				old := watch
				watch = func(string, chan<- string) (func(), error) { return nil, unix.EMFILE }
				t.Cleanup(func() { watch = old })
			}
			s := s3fake.Start(t, s3fake.Options{})
			dir := t.TempDir()
			var log testbuf.Buffer
			u := &Uploader{Target: target(s, 0, dir), NoInotify: noInotify, ScanInterval: 10 * time.Millisecond, Settle: 50 * time.Millisecond, Log: &log}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { u.Run(ctx); close(done) }()
			write(t, dir, "step-5.pt", "five", 1)
			waitFor(t, "the scan's upload", func() bool { return len(s.Keys(s3layout.CheckpointManifestKey(prefix, 0))) > 0 })
			cancel()
			<-done
			if got := manifest(t, s, 0); !reflect.DeepEqual(got, []string{"step-5.pt"}) {
				t.Errorf("manifest = %q", got)
			}
			if said := strings.Contains(log.String(), "no inotify"); said == noInotify {
				t.Errorf("log:\n%s", log.String())
			}
		})
	}
}

// With inotify, a file closed after writing is uploaded at once, long before a scan would.
func TestUploaderInotify(t *testing.T) {
	s := s3fake.Start(t, s3fake.Options{})
	dir := t.TempDir()
	var log testbuf.Buffer
	// The folder exists before the watch, and the file is written only once the watch is in
	// place: with an hour's scan and settle, only the notification can upload it.
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	old := watch
	watch = func(d string, out chan<- string) (func(), error) {
		defer close(ready)
		return old(d, out)
	}
	t.Cleanup(func() { watch = old })
	u := &Uploader{Target: target(s, 0, dir), ScanInterval: time.Hour, Settle: time.Hour, Log: &log}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { u.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	<-ready
	// Written without write's Chtimes: a time set after the close would make the notified round
	// see the file change under its upload, and the hour's scan would be the next to look.
	if err := os.WriteFile(filepath.Join(dir, "sub", "step-1.pt"), []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the notified upload", func() bool { return len(s.Keys(s3layout.CheckpointManifestKey(prefix, 0))) > 0 })
	if got := manifest(t, s, 0); !reflect.DeepEqual(got, []string{"sub/step-1.pt"}) {
		t.Errorf("manifest = %q", got)
	}
	if strings.Contains(log.String(), "no inotify") {
		t.Errorf("log:\n%s", log.String())
	}
}

// A failed upload is said once, tried again on each round, and said again when it succeeds;
// Flush returns the error of a last round that fails.
func TestUploaderRetries(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	s := s3fake.Start(t, s3fake.Options{Wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if failing.Load() && r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "a.pt") {
				s3fake.WriteError(w, http.StatusForbidden, "AccessDenied")
				return
			}
			h.ServeHTTP(w, r)
		})
	}})
	dir := t.TempDir()
	write(t, dir, "a.pt", "a", 1)
	var log testbuf.Buffer
	u := &Uploader{Target: target(s, 0, dir), NoInotify: true, Log: &log}
	ctx := context.Background()
	for range 2 {
		if err := u.Flush(ctx); err == nil || exitcode.Of(err) != exitcode.Forbidden {
			t.Fatalf("Flush = %v", err)
		}
	}
	if n := strings.Count(log.String(), "uploading a.pt failed, trying again later"); n != 1 {
		t.Errorf("said %d times:\n%s", n, log.String())
	}
	failing.Store(false)
	if err := u.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "uploaded a.pt after all") || !reflect.DeepEqual(manifest(t, s, 0), []string{"a.pt"}) {
		t.Errorf("log:\n%s", log.String())
	}
}

// A new run started with --resume-from restores the earlier run's checkpoints while it has
// none of its own, and its own once it has kept one; an earlier run with none is an error.
func TestRestoreFromAnEarlierRun(t *testing.T) {
	s := s3fake.Start(t, s3fake.Options{})
	old := "results/buggy/uid-0/"
	src := t.TempDir()
	write(t, src, "step-4.pt", "four", 1)
	up := &Uploader{Target: Target{Client: s.Client, Bucket: s.Bucket, ResultsPrefix: old, Dir: src}, NoInotify: true}
	if err := up.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	tg := target(s, 0, dir)
	tg.From = old
	var log testbuf.Buffer
	r, err := Restore(context.Background(), tg, &log)
	if err != nil || r.Resume != filepath.Join(dir, "step-4.pt") || len(r.Own.Files) != 0 {
		t.Fatalf("first attempt: %+v, %v", r, err)
	}
	if !strings.Contains(log.String(), "from s3://"+s.Bucket+"/"+old) {
		t.Errorf("the log does not say where from:\n%s", log.String())
	}
	// This run keeps a checkpoint of its own: the next attempt resumes from it.
	write(t, dir, "step-9.pt", "nine", 2)
	up = &Uploader{Target: tg, NoInotify: true, Own: r.Own}
	if err := up.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	r, err = Restore(context.Background(), Target{Client: s.Client, Bucket: s.Bucket, ResultsPrefix: prefix, Dir: t.TempDir(), From: old}, nil)
	if err != nil || filepath.Base(r.Resume) != "step-9.pt" {
		t.Errorf("later attempt resumes from %q (%v), want this run's step-9.pt", r.Resume, err)
	}

	tg = target(s, 0, t.TempDir())
	tg.ResultsPrefix, tg.From = "results/new/uid-2/", "results/none/uid-3/"
	if _, err := Restore(context.Background(), tg, nil); err == nil || !strings.Contains(err.Error(), "has no complete checkpoint") {
		t.Errorf("an earlier run without checkpoints: %v", err)
	}
}

// Yield leaves the wrapper one core and a low priority, every thread of it: a child started
// afterwards would inherit it, which is why the wrapper calls it once the command runs.
func TestYield(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("niceness per thread is Linux's")
	}
	cmd := exec.Command("sh", "-c", "sleep 5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// In a child process of its own, so the test binary keeps its priority.
	helper := exec.Command(os.Args[0])
	helper.Env = append(os.Environ(), "TAO_YIELD_HELPER=1")
	out, err := helper.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "gomaxprocs=1 nice=10") {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	// The child started before keeps its priority: the test's own, which may run under nice.
	own, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := unix.Getpriority(unix.PRIO_PROCESS, cmd.Process.Pid); err != nil || n != own {
		t.Errorf("the command's niceness = %d (%v), want the test's %d", 20-n, err, 20-own)
	}
}

// TestMain runs the test binary as TestYield's helper when asked: Yield changes the whole
// process, which must not be the test binary itself.
func TestMain(m *testing.M) {
	if os.Getenv("TAO_YIELD_HELPER") == "1" {
		Yield()
		done := make(chan int)
		go func() { // a thread started after Yield
			runtime.LockOSThread()
			n, _ := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
			done <- 20 - n
		}()
		fmt.Printf("gomaxprocs=%d nice=%d\n", runtime.GOMAXPROCS(0), <-done)
		os.Exit(0)
	}
	os.Exit(m.Run())
}
