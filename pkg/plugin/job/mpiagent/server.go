package mpiagent

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Exec runs one authenticated request to its end, writing the command's output to stdout and
// stderr, and returns its exit code; an error means it could not start. It must end the
// command when ctx is done.
type Exec func(ctx context.Context, req Request, stdout, stderr io.Writer) (code int, err error)

// Server serves the agent: in each pod of an MPI job, for the launcher on rank 0's pod.
type Server struct {
	// Key is the job's agent key.
	Key []byte
	// Exec runs what a client asks.
	Exec Exec
	// Rand makes the nonces; nil is crypto/rand.
	Rand io.Reader
	// Logf says what the server did that the pod's log should show (a refused connection);
	// nil says nothing.
	Logf func(format string, args ...any)
	// Done is called for each authenticated Done request; nil ignores them.
	Done func()
}

// Serve accepts connections on ln until ctx is done or ln fails, each served on its own.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Go(func() { s.ServeConn(ctx, conn) })
	}
}

// ServeConn serves one connection and closes it.
func (s *Server) ServeConn(ctx context.Context, conn net.Conn) {
	defer func() { _ = conn.Close() }()
	req, ok := s.handshake(conn)
	if !ok {
		return
	}
	if req.Ping || req.Done {
		if req.Done && s.Done != nil {
			s.Done()
		}
		_ = writeFrame(conn, frameExit, exitPayload(0))
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The client sends nothing more: a read that ends means it went away, and so must the
	// command.
	go func() {
		var b [1]byte
		_, _ = conn.Read(b[:])
		cancel()
	}()
	w := &frameWriter{w: conn}
	code, err := s.Exec(ctx, req, w.stream(frameStdout), w.stream(frameStderr))
	if err != nil {
		_ = w.write(frameError, []byte(err.Error()))
		return
	}
	_ = w.write(frameExit, exitPayload(code))
}

// handshake sends hello and reads the request, refusing a wrong MAC.
func (s *Server) handshake(conn net.Conn) (Request, bool) {
	_ = conn.SetDeadline(time.Now().Add(HandshakeTimeout))
	nonce := make([]byte, NonceBytes)
	random := s.Rand
	if random == nil {
		random = rand.Reader
	}
	if _, err := io.ReadFull(random, nonce); err != nil {
		s.logf("MPI agent: no nonce for %s: %v", conn.RemoteAddr(), err)
		return Request{}, false
	}
	if err := writeFrame(conn, frameHello, append([]byte(Protocol+"\n"), nonce...)); err != nil {
		return Request{}, false
	}
	typ, payload, err := readFrame(conn)
	if err == nil && typ != frameRequest {
		err = errors.New("no request")
	}
	var req Request
	if err == nil {
		req, err = openRequest(s.Key, nonce, payload)
	}
	if err != nil {
		s.logf("MPI agent: refused a connection from %s: %v", conn.RemoteAddr(), err)
		if errors.Is(err, errWrongKey) {
			_ = writeFrame(conn, frameRefused, nil)
		}
		return Request{}, false
	}
	_ = conn.SetDeadline(time.Time{})
	return req, true
}

func (s *Server) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

func exitPayload(code int) []byte {
	return binary.BigEndian.AppendUint32(nil, uint32(int32(code)))
}

// frameWriter writes whole frames from the command's two streams, one at a time.
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *frameWriter) write(typ byte, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return writeFrame(f.w, typ, p)
}

func (f *frameWriter) stream(typ byte) io.Writer { return streamWriter{f, typ} }

type streamWriter struct {
	f   *frameWriter
	typ byte
}

func (s streamWriter) Write(p []byte) (int, error) {
	for rest := p; len(rest) > 0; {
		n := min(len(rest), maxFrame)
		if err := s.f.write(s.typ, rest[:n]); err != nil {
			return len(p) - len(rest), err
		}
		rest = rest[n:]
	}
	return len(p), nil
}
