package workdir

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestPackIsTheSerialArchive: the pipelined pack gives the bytes of writing the tar and
// compressing it in one goroutine, one after the other, for a tree whose files are smaller
// than, equal to and larger than a chunk, so chunk boundaries fall inside headers and files.
func TestPackIsTheSerialArchive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	files := map[string]string{}
	for i, size := range []int{0, 1, 511, 512, 513, chunkSize - 1, chunkSize, chunkSize + 1, 3*chunkSize + 7, 5000} {
		b := make([]byte, size)
		for j := range b {
			b[j] = byte('a' + rng.IntN(4)) // compressible, so compressed blocks differ from stored ones
		}
		files[fmt.Sprintf("d%d/f%02d", i%3, i)] = string(b)
	}
	for i := range 300 {
		files[fmt.Sprintf("many/%03d.py", i)] = fmt.Sprintf("print(%d)\n", i)
	}
	root := makeTree(t, files)
	tree, err := Scan(root, DefaultMaxSize)
	if err != nil {
		t.Fatal(err)
	}
	var piped bytes.Buffer
	var last int64
	sum, err := tree.Pack(&piped, func(done int64) { last = done })
	if err != nil {
		t.Fatal(err)
	}
	if last != tree.Size {
		t.Errorf("progress ended at %d of %d bytes", last, tree.Size)
	}

	var tarBytes, serial bytes.Buffer
	if err := tree.writeTar(&tarBytes, nil); err != nil {
		t.Fatal(err)
	}
	zw, err := newEncoder(&serial)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(tarBytes.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(piped.Bytes(), serial.Bytes()) {
		t.Fatalf("pipelined archive (%d bytes) differs from the serial one (%d bytes)", piped.Len(), serial.Len())
	}
	if sum.Compressed != int64(serial.Len()) {
		t.Errorf("summary says %d compressed bytes, archive has %d", sum.Compressed, serial.Len())
	}
}

// TestPipelinedDeliversEveryByteInOrder writes in sizes that straddle chunks.
func TestPipelinedDeliversEveryByteInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var want bytes.Buffer
	var got bytes.Buffer
	err := pipelined(func(w io.Writer) error {
		for range 200 {
			b := make([]byte, rng.IntN(3*chunkSize))
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			want.Write(b)
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		return nil
	}, func(b []byte) error {
		got.Write(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("got %d bytes, want %d, or in another order", got.Len(), want.Len())
	}
}

// TestPipelinedErrors: a failing consumer stops a producer that would write forever, and its
// error is the one returned; a failing producer's error is returned after what it wrote.
func TestPipelinedErrors(t *testing.T) {
	full := errors.New("disk full")
	var writeErr error
	err := pipelined(func(w io.Writer) error {
		for {
			if _, writeErr = w.Write(make([]byte, 1000)); writeErr != nil {
				return writeErr
			}
		}
	}, func([]byte) error { return full })
	if !errors.Is(err, full) || !errors.Is(writeErr, errStopped) {
		t.Errorf("consumer failing: got %v (producer saw %v)", err, writeErr)
	}

	changed := errors.New("changed while packed")
	var n int
	err = pipelined(func(w io.Writer) error {
		if _, err := w.Write([]byte("partial")); err != nil {
			return err
		}
		return changed
	}, func(b []byte) error { n += len(b); return nil })
	if !errors.Is(err, changed) {
		t.Errorf("producer failing: got %v", err)
	}
	if n != 0 {
		t.Errorf("a failed producer's last partial chunk was consumed (%d bytes)", n)
	}
}

// TestPackFailsOnAFileChangedWhilePacked goes through the pipeline: the reading goroutine's
// error reaches Pack's caller.
func TestPackFailsOnAFileChangedWhilePacked(t *testing.T) {
	root := makeTree(t, map[string]string{"a.py": "print(1)\n", "b.py": "print(2)\n"})
	tree, err := Scan(root, DefaultMaxSize)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "b.py"), []byte("print(2) # and more\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Pack(io.Discard, nil); err == nil || !bytes.Contains([]byte(err.Error()), []byte("b.py changed while it was packed")) {
		t.Errorf("got %v, want b.py changed while it was packed", err)
	}
}

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
