package workdir

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/zstd"
)

// makeTree writes files (path -> content) below a new temporary directory; a content starting
// with "->" makes a symlink to the rest.
func makeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(content, "->"); ok {
			err = os.Symlink(target, full)
		} else {
			err = os.WriteFile(full, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func paths(tr *Tree) []string {
	var out []string
	for _, e := range tr.Entries {
		out = append(out, e.Path)
	}
	return out
}

func TestScanIgnoreRules(t *testing.T) {
	root := makeTree(t, map[string]string{
		"train.py":            "print(1)",
		".gitignore":          "*.log\nbuild/\n.env\ndata/*.bin\n!data/keep.bin\n",
		".taoignore":          "checkpoints\n!important.log\n",
		"run.log":             "x",
		"important.log":       "x",
		".env":                "SECRET=1",
		"build/out.o":         "x",
		"src/build":           "a file named build: only directories match build/",
		"data/a.bin":          "x",
		"data/keep.bin":       "x",
		"data/labels.csv":     "x",
		"checkpoints/c.pt":    "x",
		".git/HEAD":           "ref: refs/heads/main",
		"sub/.git":            "gitdir: ../.git/modules/sub",
		"sub/.gitignore":      "*.tmp\n",
		"sub/x.tmp":           "x",
		"sub/y.py":            "x",
		"other/x.tmp":         "kept: sub's rules do not reach here",
		"sub/deep/z.log":      "x",
		"sub/deep/.taoignore": "!z.log\n",
		"sub/deep/other.txt":  "x",
	})
	tr, err := Scan(root, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		".gitignore", ".taoignore", "data", "data/keep.bin", "data/labels.csv", "important.log",
		"other", "other/x.tmp", "src", "src/build", "sub", "sub/.gitignore", "sub/deep",
		"sub/deep/.taoignore", "sub/deep/other.txt", "sub/y.py", "train.py",
	}
	if diff := cmp.Diff(want, paths(tr)); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}

func pack(t *testing.T, root string) ([]byte, Summary) {
	t.Helper()
	tr, err := Scan(root, 0)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	sum, err := tr.Pack(&buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), sum
}

func TestPackReproducible(t *testing.T) {
	files := map[string]string{"train.py": "print(1)\n", "data/x.csv": "1,2\n", "run.sh": "echo hi\n", "link": "->data/x.csv"}
	a := makeTree(t, files)
	b := makeTree(t, files) // created in another order of map iteration, other times, other path
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(b, "train.py"), old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(a, "run.sh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(b, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	da, sa := pack(t, a)
	db, sb := pack(t, b)
	if !bytes.Equal(da, db) || sa != sb {
		t.Fatalf("same tree, different archives: %v vs %v", sa, sb)
	}
	if sa.Files != 3 || sa.Size != int64(len("print(1)\n1,2\necho hi\n")) || sa.Compressed != int64(len(da)) || len(sa.SHA256) != 64 {
		t.Errorf("summary %+v", sa)
	}
	// Headers: zeroed times and owners, sorted.
	zr, err := zstd.NewReader(bytes.NewReader(da))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	r := tar.NewReader(zr)
	var names []string
	for {
		h, err := r.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
		if !h.ModTime.Equal(time.Unix(0, 0)) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: time %v owner %d/%d %q/%q", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		if h.Name == "run.sh" && h.Mode != 0o755 {
			t.Errorf("run.sh mode %o, want 755", h.Mode)
		}
	}
	if !slices.IsSorted(names) || len(names) != 5 {
		t.Errorf("entries %v", names)
	}
	// An edit changes the checksum.
	if err := os.WriteFile(filepath.Join(b, "train.py"), []byte("print(2)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, sc := pack(t, b); sc.SHA256 == sa.SHA256 {
		t.Error("an edited tree kept its checksum")
	}
}

func TestScanRefusesEscapingSymlinks(t *testing.T) {
	outside := t.TempDir()
	for name, target := range map[string]string{
		"absolute":          outside,
		"parent":            "../x",
		"deep parent":       "a/../../x",
		"through a symlink": "inner/../../..",
	} {
		t.Run(name, func(t *testing.T) {
			root := makeTree(t, map[string]string{"ok": "x", "inner": "->sub/sub2", "sub/sub2/f": "x", "bad": "->" + target})
			_, err := Scan(root, 0)
			if err == nil || !strings.Contains(err.Error(), "symlink bad -> "+target+" points outside") {
				t.Fatalf("got %v", err)
			}
		})
	}
	root := makeTree(t, map[string]string{"sub/f": "x", "sub/up": "->../sub/f", "dangling": "->nothing"})
	if _, err := Scan(root, 0); err != nil {
		t.Errorf("links inside the directory: %v", err)
	}
}

func TestScanSizeBound(t *testing.T) {
	root := makeTree(t, map[string]string{
		"small": "x", "big.bin": strings.Repeat("b", 3000), "mid.bin": strings.Repeat("m", 2000),
		"ignored.bin": strings.Repeat("i", 100000), ".taoignore": "ignored.bin\n",
	})
	if _, err := Scan(root, 5013); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	_, err := Scan(root, 5012)
	var tl *TooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("got %v", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "more than --workdir-max-size") || strings.Index(msg, "big.bin") > strings.Index(msg, "mid.bin") || strings.Contains(msg, "ignored.bin\n") {
		t.Errorf("message:\n%s", msg)
	}
}

func TestUnpackRoundTrip(t *testing.T) {
	root := makeTree(t, map[string]string{"train.py": "print(1)\n", "data/x.csv": "1,2\n", "run.sh": "echo\n", "link": "->data/x.csv", "empty/.keep": ""})
	if err := os.Chmod(filepath.Join(root, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, sum := pack(t, root)
	archive := filepath.Join(t.TempDir(), ArchiveName)
	if err := os.WriteFile(archive, data, 0o644); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "workspace")
	if _, err := Unpack(archive, dest, strings.Repeat("0", 64)); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Fatalf("wrong checksum: %v", err)
	}
	if _, err := os.Stat(dest); !os.IsNotExist(err) {
		t.Fatalf("a refused archive left %s: %v", dest, err)
	}
	got, err := Unpack(archive, dest, sum.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	if got != sum {
		t.Errorf("unpack summary %+v, pack %+v", got, sum)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "link")); string(b) != "1,2\n" {
		t.Errorf("link reads %q", b)
	}
	if fi, err := os.Stat(filepath.Join(dest, "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("run.sh: %v %v", fi, err)
	}
	// Packing the unpacked tree gives the same bytes.
	if again, _ := pack(t, dest); !bytes.Equal(again, data) {
		t.Error("repacking the unpacked tree changed the archive")
	}
}

// handmade builds an archive of headers that Pack never writes.
func handmade(t *testing.T, hdrs ...*tar.Header) (string, string) {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := zstd.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			_, _ = tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	tw.Close()
	zw.Close()
	name := filepath.Join(t.TempDir(), ArchiveName)
	if err := os.WriteFile(name, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := Checksum(name)
	if err != nil {
		t.Fatal(err)
	}
	return name, sum
}

func TestUnpackRefusesEscapes(t *testing.T) {
	for name, hdrs := range map[string][]*tar.Header{
		"dotdot":       {{Name: "../evil", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}},
		"absolute":     {{Name: "/etc/evil", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}},
		"link out":     {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../.."}},
		"through link": {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "d"}, {Name: "l/f", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}},
		"device":       {{Name: "dev", Typeflag: tar.TypeChar}},
		"twice":        {{Name: "f", Typeflag: tar.TypeReg, Size: 1}, {Name: "f", Typeflag: tar.TypeReg, Size: 1}},
	} {
		t.Run(name, func(t *testing.T) {
			archive, sum := handmade(t, hdrs...)
			if _, err := Unpack(archive, t.TempDir(), sum); err == nil {
				t.Fatal("unpacked")
			}
		})
	}
}
