// Package mpiagent is how an MPI job's launcher starts processes on the job's other pods with
// nothing in the user's image: mpirun (OpenMPI's plm_rsh_agent, MPICH hydra's launcher-exec)
// runs the agent client as a remote shell, `AGENT [OPTIONS] HOST COMMAND...`, and the client
// asks the supervisor of HOST's pod, which serves the agent on the job's agent port, to run
// COMMAND there.
//
// One TCP connection per command, in frames (a type byte, a 4-byte big-endian length, the
// payload, never more than maxFrame):
//
//  1. the server sends hello: the protocol's name and a fresh random nonce;
//  2. the client sends its request (argv, working directory, environment) and, before it, an
//     HMAC-SHA256 with the job's key over the protocol's name, the nonce and the request, so a
//     client without the key cannot run anything, nor replay or alter another's request;
//  3. a wrong MAC gets a refusal frame and the connection closed (the server logs it);
//     otherwise the server runs the command and streams its stdout and stderr back as they
//     come, then its exit code; a command that cannot start gets an error frame.
//
// The command runs as sshd runs a remote command, its words joined by spaces under /bin/sh -c:
// both OpenMPI and hydra build the line for a remote shell. It gets no stdin (as `ssh -n`). A
// client that goes away ends the command: mpirun ending or being stopped stops its daemons.
package mpiagent

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Protocol names the protocol and its version, in hello and in the MAC.
const Protocol = "tao-mpi-agent/1"

// NonceBytes is the size of the server's nonce.
const NonceBytes = 32

// HandshakeTimeout bounds the hello and the request: a connection that says nothing holds no
// goroutine for long.
const HandshakeTimeout = 10 * time.Second

// maxFrame bounds every frame read, so a peer cannot make the other side allocate without
// limit; a request's environment fits well within it.
const maxFrame = 1 << 20

// Frame types.
const (
	frameHello   byte = 'H'
	frameRequest byte = 'R'
	frameRefused byte = 'X'
	frameStdout  byte = 'O'
	frameStderr  byte = 'E'
	frameExit    byte = 'Z'
	frameError   byte = '!'
)

// ErrRefused is the client's error when the server refused its key.
var ErrRefused = errors.New("the MPI agent refused the connection: wrong key")

// Request is what the client asks the server to run.
type Request struct {
	// Argv are the words after HOST on the agent's command line.
	Argv []string `json:"argv"`
	// Dir is the working directory; "" is the server's own.
	Dir string `json:"dir,omitempty"`
	// Env are KEY=VALUE set over the server's environment.
	Env []string `json:"env,omitempty"`
	// Ping asks only whether the server is up and holds the key: nothing runs.
	Ping bool `json:"ping,omitempty"`
	// Done tells the server that the launcher's MPI world ended well, so its pod has nothing
	// left to serve: nothing runs.
	Done bool `json:"done,omitempty"`
}

// ShellArgv is how a request's words run, as sshd runs a remote command.
func ShellArgv(words []string) []string {
	return []string{"/bin/sh", "-c", strings.Join(words, " ")}
}

// mac is the request's authenticator: HMAC-SHA256 under key of the protocol, the nonce and the
// request's bytes.
func mac(key, nonce, request []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(Protocol))
	h.Write(nonce)
	h.Write(request)
	return h.Sum(nil)
}

func writeFrame(w io.Writer, typ byte, payload []byte) error {
	if len(payload) > maxFrame {
		return fmt.Errorf("a frame of %d bytes, more than %d", len(payload), maxFrame)
	}
	buf := make([]byte, 5+len(payload))
	buf[0] = typ
	binary.BigEndian.PutUint32(buf[1:5], uint32(len(payload)))
	copy(buf[5:], payload)
	_, err := w.Write(buf)
	return err
}

func readFrame(r io.Reader) (typ byte, payload []byte, err error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[1:5])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("a frame of %d bytes, more than %d", n, maxFrame)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, err
	}
	return head[0], payload, nil
}

// requestFrame is the request frame's payload: the MAC, then the request as JSON.
func requestFrame(key, nonce []byte, req Request) ([]byte, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return append(mac(key, nonce, body), body...), nil
}

// openRequest checks a request frame's MAC and decodes it.
func openRequest(key, nonce, payload []byte) (Request, error) {
	var req Request
	if len(payload) < sha256.Size {
		return req, errors.New("a request shorter than its MAC")
	}
	sum, body := payload[:sha256.Size], payload[sha256.Size:]
	if !hmac.Equal(sum, mac(key, nonce, body)) {
		return req, errWrongKey
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return req, fmt.Errorf("a request that is not JSON: %w", err)
	}
	if !req.Ping && !req.Done && len(req.Argv) == 0 {
		return req, errors.New("a request with no command")
	}
	return req, nil
}

var errWrongKey = errors.New("wrong key")

// ParseArgs reads the agent's command line as mpirun gives it, `[OPTIONS] HOST COMMAND...`:
// remote-shell options before HOST are skipped (those of ssh that take a value take the next
// word), a USER@ before the host is dropped (every pod runs as the container's user).
func ParseArgs(args []string) (host string, command []string, err error) {
	i := 0
	for ; i < len(args) && strings.HasPrefix(args[i], "-") && len(args[i]) > 1; i++ {
		if args[i] == "--" {
			i++
			break
		}
		if len(args[i]) == 2 && strings.ContainsRune("bcDEeFIiJLlmOopQRSWw", rune(args[i][1])) {
			i++
		}
	}
	if i >= len(args) {
		return "", nil, errors.New("want `[OPTIONS] HOST COMMAND...`: no host")
	}
	host = args[i]
	if _, h, ok := strings.Cut(host, "@"); ok {
		host = h
	}
	if host == "" || len(args[i+1:]) == 0 {
		return "", nil, errors.New("want `[OPTIONS] HOST COMMAND...`: no command")
	}
	return host, args[i+1:], nil
}
