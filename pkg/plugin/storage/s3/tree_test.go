package s3

import (
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
		if err == nil && strings.HasPrefix(d.Name(), partPrefix) {
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
