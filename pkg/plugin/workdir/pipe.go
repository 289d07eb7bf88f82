package workdir

import (
	"errors"
	"io"
)

// Sizes of pipelined's queue: chunks big enough that handing one over costs nothing next to
// compressing it, few enough that the queue stays a couple of MiB.
const (
	chunkSize  = 256 << 10
	chunkQueue = 4
)

// errStopped is what produce's writes return once consume has failed: produce stops there.
var errStopped = errors.New("workdir: packing stopped")

// pipelined runs produce in a goroutine of its own and hands what it writes, in chunks, to
// consume in the caller's goroutine, with up to chunkQueue chunks in between, so that the two
// overlap. It returns once produce has returned, with consume's error if consume failed (then
// produce's writes fail from there on and nothing more is consumed), else produce's.
func pipelined(produce func(io.Writer) error, consume func([]byte) error) error {
	out := make(chan []byte, chunkQueue)
	// Every chunk in flight (queued, being consumed, being filled) comes back through free,
	// which has room for all of them: giving one back never blocks.
	free := make(chan []byte, chunkQueue+2)
	for range chunkQueue + 1 {
		free <- make([]byte, 0, chunkSize)
	}
	stop := make(chan struct{})
	produced := make(chan error, 1)
	go func() {
		cw := &chunkWriter{buf: make([]byte, 0, chunkSize), out: out, free: free, stop: stop}
		err := produce(cw)
		if err == nil {
			err = cw.flush()
		}
		close(out)
		produced <- err
	}()
	var consumeErr error
	for b := range out {
		if consumeErr == nil {
			if consumeErr = consume(b); consumeErr != nil {
				close(stop)
			}
		}
		free <- b[:0]
	}
	produceErr := <-produced
	if consumeErr != nil {
		return consumeErr
	}
	return produceErr
}

// chunkWriter is produce's end of pipelined: it fills one chunk and queues it when full.
type chunkWriter struct {
	buf  []byte
	out  chan<- []byte
	free <-chan []byte
	stop <-chan struct{}
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := copy(c.buf[len(c.buf):cap(c.buf)], p)
		c.buf, p, n = c.buf[:len(c.buf)+k], p[k:], n+k
		if len(c.buf) == cap(c.buf) {
			if err := c.flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// flush queues the chunk being filled (if it holds anything) and takes a free one.
func (c *chunkWriter) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	select {
	case c.out <- c.buf:
	case <-c.stop:
		return errStopped
	}
	select {
	case c.buf = <-c.free:
	case <-c.stop:
		return errStopped
	}
	return nil
}
