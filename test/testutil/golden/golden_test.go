package golden

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that records failures instead of failing the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Errorf(f string, args ...any) { r.failed += fmt.Sprintf(f, args...) }
func (r *recorder) Fatalf(f string, args ...any) {
	r.failed += fmt.Sprintf(f, args...)
	runtime.Goexit()
}
func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

// run calls f with a recorder in its own goroutine (Fatalf ends it) and returns the failure.
func run(t *testing.T, f func(tb testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); f(r) }()
	<-done
	return r.failed
}

func TestFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.txt")
	if err := os.WriteFile(path, []byte("a\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if msg := run(t, func(tb testing.TB) { File(tb, path, "a\nb\n") }); msg != "" {
		t.Errorf("same content failed: %s", msg)
	}
	msg := run(t, func(tb testing.TB) { File(tb, path, "a\nc\n") })
	if !strings.Contains(msg, "(-want +got)") || !strings.Contains(msg, "c") {
		t.Errorf("different content: %q, want a (-want +got) diff", msg)
	}
	if msg := run(t, func(tb testing.TB) { File(tb, path+".missing", "x") }); !strings.Contains(msg, "-update creates it") {
		t.Errorf("missing file: %q", msg)
	}
}

func TestDir(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"a.md": "A", "b.md": "B", "keep.txt": "other"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if msg := run(t, func(tb testing.TB) { Dir(tb, dir, ".md", map[string]string{"a.md": "A", "b.md": "B"}) }); msg != "" {
		t.Errorf("same files failed: %s", msg)
	}
	msg := run(t, func(tb testing.TB) { Dir(tb, dir, ".md", map[string]string{"a.md": "changed", "c.md": "C"}) })
	for _, want := range []string{"a.md", "b.md (not generated)", "c.md"} {
		if !strings.Contains(msg, want) {
			t.Errorf("stale files: %q lacks %q", msg, want)
		}
	}

	*update = true
	defer func() { *update = false }()
	if msg := run(t, func(tb testing.TB) { Dir(tb, dir, ".md", map[string]string{"a.md": "new", "c.md": "C"}) }); msg != "" {
		t.Fatalf("update failed: %s", msg)
	}
	*update = false
	if msg := run(t, func(tb testing.TB) {
		Dir(tb, dir, ".md", map[string]string{"a.md": "new", "c.md": "C"})
	}); msg != "" {
		t.Errorf("after update: %s", msg)
	}
	if _, err := os.Stat(filepath.Join(dir, "keep.txt")); err != nil {
		t.Errorf("update removed a file of another extension: %v", err)
	}
}
