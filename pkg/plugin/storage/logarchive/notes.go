package logarchive

import (
	"io"
	"sync"
)

// maxHeld bounds what Notes keep for an archive that is not open yet.
const maxHeld = 64 << 10

// Notes are the wrapper's own lines about an attempt (what the checkpoints restored, an upload
// that failed): on the container's stderr at once, and in the archive as well, so that `logs
// --attempt` still shows them once the pod is gone. Lines written before the Runner opens the
// archive are kept and go in first; after it closes, only stderr gets them. Safe for concurrent
// use.
type Notes struct {
	mu      sync.Mutex
	stderr  io.Writer
	archive io.Writer
	held    []byte
	closed  bool
}

// NewNotes writes to stderr, and to the archive of the Runner they are given to.
func NewNotes(stderr io.Writer) *Notes { return &Notes{stderr: stderr} }

// Write passes p to stderr and to the archive (or keeps it for the archive until it opens).
func (n *Notes) Write(p []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.archive != nil:
		_, _ = n.archive.Write(p)
	case !n.closed && len(n.held)+len(p) <= maxHeld:
		n.held = append(n.held, p...)
	}
	return n.stderr.Write(p)
}

// open starts copying into the archive, the held lines first.
func (n *Notes) open(archive io.Writer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.archive = archive
	_, _ = archive.Write(n.held)
	n.held = nil
}

// close stops copying into the archive, which is about to be closed.
func (n *Notes) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.archive, n.held, n.closed = nil, nil, true
}
