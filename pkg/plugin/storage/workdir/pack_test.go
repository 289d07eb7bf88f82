package workdir

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestPackFailsOnAFileChangedWhilePacked: a file whose size changed after Scan fails the pack
// rather than giving an archive that disagrees with its own header.
func TestPackFailsOnAFileChangedWhilePacked(t *testing.T) {
	root := makeTree(t, map[string]string{"a.py": "print(1)\n", "b.py": "print(2)\n"})
	tree, err := Scan(root, DefaultMaxSize)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "b.py"), []byte("print(2) # and more\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Pack(io.Discard, nil); err == nil || !strings.Contains(err.Error(), "b.py changed while it was packed") {
		t.Errorf("got %v, want b.py changed while it was packed", err)
	}
}

// bigTree is a tree whose tar stream spans several frames: incompressible and text files.
func bigTree(t *testing.T) string {
	t.Helper()
	rng := rand.NewChaCha8([32]byte{7, 8})
	files := map[string]string{}
	for i := range 3 {
		b := make([]byte, 5<<20)
		_, _ = rng.Read(b)
		files[fmt.Sprintf("weights/w%d.bin", i)] = string(b)
		files[fmt.Sprintf("src/m%d.py", i)] = strings.Repeat(fmt.Sprintf("x = %d\nprint(x)\n", i), 400<<10)
	}
	return makeTree(t, files)
}

// TestPackFramesDoNotDependOnCores: the archive is several frames, compressed in parallel,
// and its bytes are the same whether one core packed it or four; it reads back as one stream.
func TestPackFramesDoNotDependOnCores(t *testing.T) {
	tree, err := Scan(bigTree(t), DefaultMaxSize)
	if err != nil {
		t.Fatal(err)
	}
	packWith := func(procs int) (*Archive, Summary) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		var a Archive
		sum, err := tree.Pack(&a, nil)
		if err != nil {
			t.Fatal(err)
		}
		return &a, sum
	}
	one, s1 := packWith(1)
	four, s4 := packWith(4)
	if !bytes.Equal(one.Bytes(), four.Bytes()) || s1 != s4 {
		t.Fatalf("1 core and 4 cores packed different archives: %v vs %v", s1, s4)
	}
	if s1.Compressed != one.Size() {
		t.Errorf("summary says %d bytes, the archive holds %d", s1.Compressed, one.Size())
	}
	// The tar stream is over 30 MiB: one frame per frameSize of it.
	if n := len(one.frames); n < 4 {
		t.Errorf("%d frames, want one per %d bytes of a 30+ MiB tar stream", n, frameSize)
	}
	dest := t.TempDir()
	name := filepath.Join(t.TempDir(), "a.tar.zst")
	if err := os.WriteFile(name, one.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Unpack(name, dest, s1.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	if got.Files != s1.Files {
		t.Errorf("unpacked %d files, packed %d", got.Files, s1.Files)
	}
	b, err := os.ReadFile(filepath.Join(dest, "weights/w2.bin"))
	if want, _ := os.ReadFile(filepath.Join(tree.Root, "weights/w2.bin")); err != nil || !bytes.Equal(b, want) {
		t.Errorf("weights/w2.bin did not come back whole (%v)", err)
	}
}

// TestArchiveReadAt: reads across frame boundaries give the joined bytes; past the end, EOF.
func TestArchiveReadAt(t *testing.T) {
	var a Archive
	for _, s := range []string{"abc", "", "defgh", "ij"} {
		if _, err := a.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	all := "abcdefghij"
	if a.Size() != int64(len(all)) || string(a.Bytes()) != all {
		t.Fatalf("size %d bytes %q", a.Size(), a.Bytes())
	}
	for off := 0; off <= len(all); off++ {
		for n := 0; off+n <= len(all)+2; n++ {
			p := make([]byte, n)
			got, err := a.ReadAt(p, int64(off))
			want := min(n, len(all)-off)
			if got != want || string(p[:got]) != all[off:off+want] {
				t.Fatalf("ReadAt(%d bytes at %d) = %d %q", n, off, got, p[:got])
			}
			if (off+n > len(all)) != (err == io.EOF) {
				t.Fatalf("ReadAt(%d bytes at %d): err %v", n, off, err)
			}
		}
	}
	if got, err := io.ReadAll(a.Reader()); err != nil || string(got) != all {
		t.Errorf("Reader: %q %v", got, err)
	}
}

// TestPackStopsOnAFailingWriter: a write error of the destination ends the pack with that
// error (no hang, whatever frames are still being compressed).
func TestPackStopsOnAFailingWriter(t *testing.T) {
	tree, err := Scan(bigTree(t), DefaultMaxSize)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk full")
	if _, err := tree.Pack(&failAfter{n: 1, err: boom}, nil); !errors.Is(err, boom) {
		t.Errorf("got %v, want %v", err, boom)
	}
}

type failAfter struct {
	n   int
	err error
}

func (f *failAfter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, f.err
	}
	f.n--
	return len(p), nil
}

// TestPackReadsWithTheZstdCommand: what docs/workdir.md tells users (tar --zstd -xf) reads a
// several-frame archive whole: zstd -d gives the tar stream the frames were cut from.
func TestPackReadsWithTheZstdCommand(t *testing.T) {
	zstdCmd, err := exec.LookPath("zstd")
	if err != nil {
		// CI's machines have it: there a missing zstd is a broken machine, not a reason to pass.
		if os.Getenv("CI") == "true" {
			t.Fatal("the zstd command is not installed under CI=true (apt-get install zstd)")
		}
		t.Skip("the zstd command is not installed (apt-get install zstd)")
	}
	tree, err := Scan(bigTree(t), DefaultMaxSize)
	if err != nil {
		t.Fatal(err)
	}
	var a Archive
	if _, err := tree.Pack(&a, nil); err != nil {
		t.Fatal(err)
	}
	var tarStream bytes.Buffer
	if err := tree.writeTar(&tarStream, nil); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(zstdCmd, "-d", "-c")
	cmd.Stdin = a.Reader()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("zstd -d: %v", err)
	}
	if !bytes.Equal(out, tarStream.Bytes()) {
		t.Errorf("zstd -d gave %d bytes, not the %d-byte tar stream packed", len(out), tarStream.Len())
	}
}
