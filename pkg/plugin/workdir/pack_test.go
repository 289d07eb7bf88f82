package workdir

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestArchiveBound: the bound holds for what compresses worst (random bytes) with long paths
// and link targets (PAX records).
func TestArchiveBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	long := "d/" + string(bytes.Repeat([]byte("x"), 200))
	files := map[string]string{long + "/t": "->" + string(bytes.Repeat([]byte("../"+filepath.Base(long)+"/"), 3)) + "f0"}
	for i, size := range []int{0, 1, 700, 300 << 10} {
		b := make([]byte, size)
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		files[fmt.Sprintf("%s/f%d", long, i)] = string(b)
	}
	tree, err := Scan(makeTree(t, files), DefaultMaxSize)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := tree.Pack(&buf, nil); err != nil {
		t.Fatal(err)
	}
	if bound := tree.ArchiveBound(); buf.Len() > bound {
		t.Errorf("archive of %d bytes over its bound %d", buf.Len(), bound)
	}
}

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
