package localcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kubectl-tao/kubectl-tao/hack/release"
)

func TestTorchUnavailable(t *testing.T) {
	root := t.TempDir()
	why := TorchUnavailable(root)
	if !strings.Contains(why, "python3-torch is not installed") || !strings.Contains(why, "apt-get install") || !strings.Contains(why, hostPython) {
		t.Errorf("no python: %q, want the package, the python path and how to install it", why)
	}
	touchUnder(t, root, hostPython)
	if why := TorchUnavailable(root); !strings.Contains(why, "dist-packages/torch/__init__.py") {
		t.Errorf("python without torch: %q, want the missing torch package named", why)
	}
	touchUnder(t, root, filepath.Join(distPackages, "torch", "__init__.py"))
	if why := TorchUnavailable(root); why != "" {
		t.Errorf("python3-torch present: %q, want none", why)
	}
}

// touchUnder makes an empty executable file at the absolute path p below root.
func touchUnder(t *testing.T, root, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, p), nil, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestHostTreeKeepsSymlinks: a path is copied as the host resolves it, each symlink on the way
// kept (a directory symlink like /lib64, a soname chain, an absolute link), a dangling symlink
// kept as it is, and files keep their mode and mtime.
func TestHostTreeKeepsSymlinks(t *testing.T) {
	root := t.TempDir()
	rel := strings.TrimPrefix(root, "/")
	mk := func(p, content string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	link := func(p, target string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	mk("usr/lib/x/libfoo.so.1.2", "foo")
	link("usr/lib/x/libfoo.so.1", "libfoo.so.1.2")
	link("lib", "usr/lib")
	link("pkg/lib/libfoo.so", filepath.Join(root, "usr/lib/x/libfoo.so.1"))
	link("pkg/test", "../absent")
	mtime := time.Unix(1678800000, 0)
	if err := os.Chtimes(filepath.Join(root, "usr/lib/x/libfoo.so.1.2"), mtime, mtime); err != nil {
		t.Fatal(err)
	}

	tr := &hostTree{entries: map[string]release.LayerEntry{}}
	if err := tr.add(filepath.Join(root, "lib/x/libfoo.so.1")); err != nil {
		t.Fatal(err)
	}
	sos, err := tr.addTree(filepath.Join(root, "pkg"), func(string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	if len(sos) != 1 || sos[0] != filepath.Join(root, "pkg/lib/libfoo.so") {
		t.Errorf("shared objects = %q, want the symlinked library", sos)
	}
	want := map[string]string{
		rel + "/lib":                     "-> usr/lib",
		rel + "/usr/lib/x/libfoo.so.1":   "-> libfoo.so.1.2",
		rel + "/usr/lib/x/libfoo.so.1.2": "file 640 " + mtime.String(),
		rel + "/pkg/lib/libfoo.so":       "-> " + filepath.Join(root, "usr/lib/x/libfoo.so.1"),
		rel + "/pkg/test":                "-> ../absent",
		rel + "/usr/lib/x":               "dir 755",
		rel + "/pkg":                     "dir 755",
	}
	for p, w := range want {
		e, ok := tr.entries[p]
		got := "missing"
		switch {
		case !ok:
		case e.Link != "":
			got = "-> " + e.Link
		case e.Dir:
			got = "dir " + fmt.Sprintf("%o", e.Mode)
		default:
			got = "file " + fmt.Sprintf("%o", e.Mode) + " " + e.ModTime.String()
			if e.Src != "/"+p {
				t.Errorf("%s: Src %q, want the host file", p, e.Src)
			}
		}
		if got != w {
			t.Errorf("%s: %s, want %s", p, got, w)
		}
	}
	if _, ok := tr.entries[strings.TrimPrefix(filepath.Join(filepath.Dir(root), "absent"), "/")]; ok {
		t.Error("a dangling symlink's target was made up")
	}
	if err := tr.add(filepath.Join(root, "nothing-here")); err == nil {
		t.Error("a missing path asked for directly: no error")
	}
}
