package s3

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

func TestPlanTreeRefusesKeysOutsideTheDir(t *testing.T) {
	dir := t.TempDir()
	ok := []Object{{Key: "p/a.txt"}, {Key: "p/sub/b.txt"}, {Key: "p/sub/"}, {Key: "p/..x/c"}}
	files, err := planTree("p/", ok, dir)
	if err != nil || len(files) != 3 || files[1].dest != filepath.Join(dir, "sub", "b.txt") || files[2].dest != filepath.Join(dir, "..x", "c") {
		t.Fatalf("planTree = %+v, %v", files, err)
	}
	for _, bad := range []string{"p/../escape", "p/a/../../escape", "p//etc/passwd", "p/./a", "p/a\\..\\b", "other/x", "p/a//b"} {
		_, err := planTree("p/", append(ok, Object{Key: bad}), dir)
		if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "nothing was written") {
			t.Errorf("key %q: %v", bad, err)
		}
	}
}

func treeOf(f *fakeS3, prefix string) []Object {
	f.t.Helper()
	objs, err := List(context.Background(), f.Client, bucket, prefix)
	if err != nil {
		f.t.Fatal(err)
	}
	return objs
}

type countingProgress struct{ bytes, objects atomic.Int64 }

func (p *countingProgress) Bytes(n int64) { p.bytes.Add(n) }
func (p *countingProgress) Object()       { p.objects.Add(1) }

func TestDownloadTreeResumesAndSkipsWhatIsComplete(t *testing.T) {
	f := newFakeS3(t)
	const n = 60
	for i := range n {
		f.Put(fmt.Sprintf("results/j/u/out/f%02d.bin", i), strings.Repeat(fmt.Sprint(i%10), 1000+i))
	}
	f.Put("results/j/u/.kubectl-tao/logs/rank-0.log", "hello\n")
	dir := filepath.Join(t.TempDir(), "dl")
	s := &Stager{Client: f.Client, Backoff: time.Millisecond, Attempts: 2}
	tree := Tree{Bucket: bucket, Prefix: "results/j/u/", Objects: treeOf(f, "results/j/u/"), Dir: dir}

	// A first run breaks on a third of the objects: the rest lands, the failed ones not at all.
	f.fail = func(r *http.Request) int {
		if r.Method == http.MethodGet && (strings.HasSuffix(r.URL.Path, "3.bin") || strings.HasSuffix(r.URL.Path, "7.bin")) {
			return http.StatusForbidden
		}
		return 0
	}
	res, err := s.DownloadTree(context.Background(), tree)
	if err == nil || exitcode.Of(err) != exitcode.Forbidden || res.Downloaded != n+1-12 || res.Skipped != 0 {
		t.Fatalf("first run: %+v, %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "f03.bin")); !os.IsNotExist(err) {
		t.Errorf("a failed object left a file: %v", err)
	}

	// The second run fetches only the failed ones.
	f.fail = nil
	before := map[string]int{}
	for k, v := range f.requests {
		before[k] = v
	}
	var p countingProgress
	tree.Progress = &p
	res, err = s.DownloadTree(context.Background(), tree)
	if err != nil || res.Downloaded != 12 || res.Skipped != n+1-12 {
		t.Fatalf("second run: %+v, %v", res, err)
	}
	for i := range n {
		key := fmt.Sprintf("results/j/u/out/f%02d.bin", i)
		gets := f.count("GET", key) - before["GET /"+bucket+"/"+key]
		if want := map[bool]int{true: 1, false: 0}[i%10 == 3 || i%10 == 7]; gets != want {
			t.Errorf("%s: fetched %d times on the second run, want %d", key, gets, want)
		}
		got, err := os.ReadFile(filepath.Join(dir, "out", fmt.Sprintf("f%02d.bin", i)))
		if err != nil || string(got) != strings.Repeat(fmt.Sprint(i%10), 1000+i) {
			t.Errorf("%s: %v", key, err)
		}
	}
	if p.objects.Load() != n+1 {
		t.Errorf("progress saw %d objects", p.objects.Load())
	}

	// A file of the right size but other bytes is not complete: fetched again.
	victim := filepath.Join(dir, "out", "f05.bin")
	if err := os.WriteFile(victim, []byte(strings.Repeat("x", 1005)), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err = s.DownloadTree(context.Background(), tree)
	if got, _ := os.ReadFile(victim); err != nil || res.Downloaded != 1 || string(got) != strings.Repeat("5", 1005) {
		t.Errorf("third run: %+v, %v", res, err)
	}
	// No temporary file is left anywhere.
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && IsPart(d.Name()) {
			t.Errorf("left %s", p)
		}
		return err
	})
}

func TestDownloadTreeRefusesSymlinks(t *testing.T) {
	f := newFakeS3(t)
	f.Put("p/sub/x.txt", "inside?")
	f.Put("p/y.txt", "fine")
	root := t.TempDir()
	dir, outside := filepath.Join(root, "dl"), filepath.Join(root, "outside")
	for _, d := range []string{dir, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	s := &Stager{Client: f.Client, Backoff: time.Millisecond}
	res, err := s.DownloadTree(context.Background(), Tree{Bucket: bucket, Prefix: "p/", Objects: treeOf(f, "p/"), Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "is a symbolic link") || res.Downloaded != 1 {
		t.Fatalf("%+v, %v", res, err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("wrote through the link: %v", entries)
	}
}

func TestIncluded(t *testing.T) {
	objs := []Object{{Key: "p/results/model.pth"}, {Key: "p/results/logs/a.log"}, {Key: "p/.kubectl-tao/logs/rank-0.log"}, {Key: "p/results/x.pth.tmp"}}
	keys := func(os []Object) string {
		var k []string
		for _, o := range os {
			k = append(k, o.Key)
		}
		return strings.Join(k, " ")
	}
	for globs, want := range map[string]string{
		"":                  "p/results/model.pth p/results/logs/a.log p/.kubectl-tao/logs/rank-0.log p/results/x.pth.tmp",
		"*.log":             "p/results/logs/a.log p/.kubectl-tao/logs/rank-0.log",
		"results/*.pth":     "p/results/model.pth",
		"*.pth results/*/*": "p/results/model.pth p/results/logs/a.log",
	} {
		if got := keys(Included("p/", objs, strings.Fields(globs))); got != want {
			t.Errorf("%q: %s; want %s", globs, got, want)
		}
	}
	if err := ValidateGlobs([]string{"[a-"}); err == nil {
		t.Error("a bad pattern passed")
	}
}

// Explicit files land at their own paths with the times given (not the objects'), and each is
// checked against the ETag its answer carries when none was listed: a body cut short or
// altered on the way is fetched again, an object of another size is not (trying again cannot
// help), and a path outside the directory is refused before anything is written.
func TestDownloadFilesChecksRetriesAndSetsTimes(t *testing.T) {
	f := newFakeS3(t)
	a, b := strings.Repeat("a", 300_000), strings.Repeat("b", 200_000)
	f.Put("ckpt/rank-1/step-5/model.bin", a)
	f.Put("ckpt/rank-0/step-5/optim.bin", b)
	f.Put("ckpt/rank-0/small.txt", "12345")
	f.truncate = firstRequests(1, http.MethodGet, "/"+bucket+"/ckpt/rank-1/step-5/model.bin")
	f.corrupt = firstRequests(1, http.MethodGet, "/"+bucket+"/ckpt/rank-0/step-5/optim.bin")
	written := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	dir := filepath.Join(t.TempDir(), "ckpt")
	var log bytes.Buffer
	s := f.stager(&log)
	files := []File{
		{Key: "ckpt/rank-1/step-5/model.bin", Path: "step-5/model.bin", Size: int64(len(a)), ModTime: written},
		{Key: "ckpt/rank-0/step-5/optim.bin", Path: "step-5/optim.bin", Size: int64(len(b)), ModTime: written.Add(time.Second)},
	}
	res, err := s.DownloadFiles(context.Background(), Files{Bucket: bucket, Dir: dir, Files: files, Op: "restoring"})
	if err != nil || res.Downloaded != 2 || res.Bytes != int64(len(a)+len(b)) {
		t.Fatalf("DownloadFiles = %+v, %v\n%s", res, err, log.String())
	}
	for i, want := range []string{a, b} {
		p := filepath.Join(dir, filepath.FromSlash(files[i].Path))
		if readFile(t, p) != want {
			t.Errorf("%s: content differs", p)
		}
		if fi, err := os.Stat(p); err != nil || !fi.ModTime().Equal(files[i].ModTime) {
			t.Errorf("%s: mtime %v, want %v (%v)", p, fi.ModTime(), files[i].ModTime, err)
		}
		if n := f.count("GET", files[i].Key); n != 2 {
			t.Errorf("%s: %d GETs, want a broken one and a good one", files[i].Key, n)
		}
	}
	for _, want := range []string{"retrying s3://" + bucket + "/ckpt/rank-1/step-5/model.bin", "do not match the ETag"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}

	// A second run finds both complete by size and time: no request.
	res, err = s.DownloadFiles(context.Background(), Files{Bucket: bucket, Dir: dir, Files: files})
	if err != nil || res.Skipped != 2 || res.Downloaded != 0 || f.count("GET", files[0].Key) != 2 {
		t.Fatalf("second run = %+v, %v", res, err)
	}

	// The object is not the size expected: one GET, and an error naming it.
	wrong := File{Key: "ckpt/rank-0/small.txt", Path: "small.txt", Size: 6}
	res, err = s.DownloadFiles(context.Background(), Files{Bucket: bucket, Dir: dir, Files: []File{wrong}, Op: "restoring"})
	if err == nil || !strings.Contains(err.Error(), "restoring s3://"+bucket+"/ckpt/rank-0/small.txt") ||
		!strings.Contains(err.Error(), "5 bytes, not the 6 expected") || res.Downloaded != 0 {
		t.Fatalf("wrong size = %+v, %v", res, err)
	}
	if n := f.count("GET", wrong.Key); n != 1 {
		t.Errorf("wrong size: %d GETs, want 1", n)
	}
	if _, err := os.Stat(filepath.Join(dir, "small.txt")); !os.IsNotExist(err) {
		t.Errorf("wrong size left a file: %v", err)
	}

	// A path outside the directory: refused, nothing fetched.
	out := filepath.Join(t.TempDir(), "other")
	_, err = s.DownloadFiles(context.Background(), Files{Bucket: bucket, Dir: out, Files: []File{
		{Key: "ckpt/rank-0/small.txt", Path: "ok.txt", Size: 5},
		{Key: "ckpt/rank-0/small.txt", Path: "../escape.txt", Size: 5},
	}})
	if err == nil || exitcode.Of(err) != exitcode.Usage || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("escaping path: %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused set made %s: %v", out, err)
	}
}

// A part file's name is told apart from a file of the user's, whatever its name.
func TestIsPart(t *testing.T) {
	dir := t.TempDir()
	tmp, err := os.CreateTemp(dir, partPrefix+"model.pt-")
	if err != nil {
		t.Fatal(err)
	}
	_ = tmp.Close()
	for name, want := range map[string]bool{filepath.Base(tmp.Name()): true, "model.pt": false, "tao-part-x": false, "checkpoint-5": false} {
		if IsPart(name) != want {
			t.Errorf("IsPart(%q) = %v", name, !want)
		}
	}
}
