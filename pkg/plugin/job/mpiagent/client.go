package mpiagent

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"
)

// Run asks the server at the other end of conn to run req, copies the command's output to
// stdout and stderr, and returns its exit code. It closes conn; ctx ends the wait (the server
// then ends the command).
func Run(ctx context.Context, conn net.Conn, key []byte, req Request, stdout, stderr io.Writer) (int, error) {
	defer func() { _ = conn.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	code, err := run(conn, key, req, stdout, stderr)
	if err != nil && ctx.Err() != nil {
		return 0, ctx.Err()
	}
	return code, err
}

func run(conn net.Conn, key []byte, req Request, stdout, stderr io.Writer) (int, error) {
	_ = conn.SetDeadline(time.Now().Add(HandshakeTimeout))
	typ, hello, err := readFrame(conn)
	if err != nil {
		return 0, fmt.Errorf("reading the MPI agent's hello: %w", err)
	}
	name, nonce, ok := bytes.Cut(hello, []byte("\n"))
	if typ != frameHello || !ok || string(name) != Protocol || len(nonce) != NonceBytes {
		return 0, fmt.Errorf("the other end does not speak %s", Protocol)
	}
	payload, err := requestFrame(key, nonce, req)
	if err != nil {
		return 0, err
	}
	if err := writeFrame(conn, frameRequest, payload); err != nil {
		return 0, fmt.Errorf("sending the request to the MPI agent: %w", err)
	}
	_ = conn.SetDeadline(time.Time{})
	for {
		typ, p, err := readFrame(conn)
		if err != nil {
			return 0, fmt.Errorf("the MPI agent's connection ended before the command's exit code: %w", err)
		}
		switch typ {
		case frameStdout, frameStderr:
			w := stdout
			if typ == frameStderr {
				w = stderr
			}
			if _, err := w.Write(p); err != nil {
				return 0, err
			}
		case frameExit:
			if len(p) != 4 {
				return 0, fmt.Errorf("an exit frame of %d bytes", len(p))
			}
			return int(int32(binary.BigEndian.Uint32(p))), nil
		case frameRefused:
			return 0, ErrRefused
		case frameError:
			return 0, fmt.Errorf("the MPI agent could not run the command: %s", p)
		default:
			return 0, fmt.Errorf("an MPI agent frame of unknown type %q", typ)
		}
	}
}
