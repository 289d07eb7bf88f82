// Package testbuf holds a buffer that a test may read while the code under test writes it.
// It imports nothing of the plugin, so that internal tests of the packages the plugin's root
// command imports (tail, for one) can use it without an import cycle, and so can test/.
package testbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for one writer and concurrent readers: a command writing in
// one goroutine while the test polls what it wrote so far.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
