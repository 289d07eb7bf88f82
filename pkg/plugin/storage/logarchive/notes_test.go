package logarchive

import (
	"bytes"
	"testing"
)

// Notes reach stderr at once, and the archive once it opens (earlier ones first), never after
// it closed.
func TestNotes(t *testing.T) {
	var stderr, archive bytes.Buffer
	n := NewNotes(&stderr)
	_, _ = n.Write([]byte("restored\n"))
	n.open(&archive)
	_, _ = n.Write([]byte("uploaded\n"))
	n.close()
	_, _ = n.Write([]byte("late\n"))
	if stderr.String() != "restored\nuploaded\nlate\n" || archive.String() != "restored\nuploaded\n" {
		t.Errorf("stderr %q, archive %q", stderr.String(), archive.String())
	}
}
