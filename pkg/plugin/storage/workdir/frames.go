package workdir

import (
	"bytes"
	"io"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// frameSize is how much of the tar stream goes into one zstd frame. The frames are compressed
// in parallel, one encoder each, and written in order: concatenated frames are one valid zstd
// stream (every decoder, zstd -d and tar --zstd among them, reads them as the concatenation of
// their contents), and its bytes depend on this constant only, never on how many cores packed
// it. 8 MiB is the encoder's window at its default level, so a frame boundary costs almost no
// compression.
//
// Why frames and not the encoder's own concurrency: a single zstd stream is compressed one
// block after another (klauspost's WithEncoderConcurrency only overlaps the next block's
// filling with the current one's compression), while independent frames use every core
// (docs/benchmarks.md, "S3 transfers").
const frameSize = 8 << 20

// newEncoder is the archive's one zstd setting: zstd's default level (as the zstd command's),
// one goroutine per encoder, the parallelism being the frames'.
func newEncoder() (*zstd.Encoder, error) {
	return zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedDefault))
}

// frameWriter cuts what is written to it into frameSize pieces, compresses them on workers
// goroutines and writes the frames to out in order. At most 2*workers pieces are in flight, so
// memory stays bounded whatever the tree's size. Close must be called, also after a failure.
type frameWriter struct {
	out  func(frame []byte) error
	cur  []byte
	jobs chan *frame   // to the encoders
	next chan *frame   // to the writer, in order
	free chan []byte   // pieces' buffers, reused
	done chan struct{} // closed when the writer has written (or dropped) every frame
	err  error         // the writer's first error, read after done or through failed
	mu   sync.Mutex
	enc  sync.WaitGroup
	// failed is set (under mu) by the writer's first error, so that Write stops early.
	failed error
}

type frame struct {
	src  []byte
	out  []byte
	err  error
	done chan struct{}
}

// newFrameWriter gives each compressed frame to out, in order; out may keep it.
func newFrameWriter(out func(frame []byte) error) *frameWriter {
	workers := runtime.GOMAXPROCS(0)
	f := &frameWriter{
		out:  out,
		jobs: make(chan *frame, workers),
		next: make(chan *frame, workers),
		free: make(chan []byte, 2*workers+1),
		done: make(chan struct{}),
	}
	for range workers {
		f.enc.Add(1)
		go f.encode()
	}
	go f.write()
	return f
}

// encode compresses pieces with one encoder of its own.
func (f *frameWriter) encode() {
	defer f.enc.Done()
	enc, err := newEncoder()
	for fr := range f.jobs {
		if err != nil {
			fr.err = err
		} else {
			fr.out = enc.EncodeAll(fr.src, make([]byte, 0, len(fr.src)/2+64))
		}
		close(fr.done)
	}
}

// write writes the frames in the order they were cut, returning their buffers for reuse.
func (f *frameWriter) write() {
	defer close(f.done)
	for fr := range f.next {
		<-fr.done
		select {
		case f.free <- fr.src[:0]:
		default:
		}
		if f.err != nil {
			continue
		}
		f.err = fr.err
		if f.err == nil {
			f.err = f.out(fr.out)
		}
		if f.err != nil {
			f.mu.Lock()
			f.failed = f.err
			f.mu.Unlock()
		}
	}
}

func (f *frameWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	err := f.failed
	f.mu.Unlock()
	if err != nil {
		return 0, err
	}
	n := len(p)
	for len(p) > 0 {
		if f.cur == nil {
			select {
			case f.cur = <-f.free:
			default:
				f.cur = make([]byte, 0, frameSize)
			}
		}
		k := min(len(p), frameSize-len(f.cur))
		f.cur = append(f.cur, p[:k]...)
		p = p[k:]
		if len(f.cur) == frameSize {
			f.cut()
		}
	}
	return n, nil
}

// cut hands the current piece to the encoders and, in order, to the writer.
func (f *frameWriter) cut() {
	fr := &frame{src: f.cur, done: make(chan struct{})}
	f.cur = nil
	f.next <- fr
	f.jobs <- fr
}

// Close compresses what is left, waits for every frame to be written and returns the first
// error of any.
func (f *frameWriter) Close() error {
	if len(f.cur) > 0 {
		f.cut()
	}
	close(f.jobs)
	close(f.next)
	<-f.done
	f.enc.Wait()
	return f.err
}

// Archive is a packed tree held in memory as its frames, never copied into one slice: the
// upload reads it through ReadAt (minio-go sends parts in parallel from a ReaderAt), and only
// an archive small enough for a ConfigMap is ever joined (Bytes).
type Archive struct {
	frames [][]byte
	size   int64
}

// Write keeps a copy of p. (Pack gives an Archive its frames without copying them.)
func (a *Archive) Write(p []byte) (int, error) {
	a.keep(bytes.Clone(p))
	return len(p), nil
}

// keep appends frame, which the Archive now owns.
func (a *Archive) keep(frame []byte) {
	a.frames = append(a.frames, frame)
	a.size += int64(len(frame))
}

// Size is the archive's length in bytes.
func (a *Archive) Size() int64 { return a.size }

// ReadAt implements io.ReaderAt.
func (a *Archive) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, io.ErrUnexpectedEOF
	}
	n := 0
	for _, fr := range a.frames {
		if len(p) == 0 {
			break
		}
		if off >= int64(len(fr)) {
			off -= int64(len(fr))
			continue
		}
		c := copy(p, fr[off:])
		n += c
		p = p[c:]
		off = 0
	}
	if len(p) > 0 {
		return n, io.EOF
	}
	return n, nil
}

// Reader reads the archive from its start.
func (a *Archive) Reader() *io.SectionReader { return io.NewSectionReader(a, 0, a.size) }

// Bytes is the archive in one slice (a copy).
func (a *Archive) Bytes() []byte { return bytes.Join(a.frames, nil) }
