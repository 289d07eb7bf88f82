package mpiagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

var (
	jobKey   = []byte("0123456789abcdef0123456789abcdef-job")
	otherKey = []byte("0123456789abcdef0123456789abcdef-other")
)

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		host    string
		command []string
		wantErr string
	}{
		{args: []string{"job-1.job", "orted", "-mca", "ess", "env"}, host: "job-1.job", command: []string{"orted", "-mca", "ess", "env"}},
		// ssh's own options, as a user's plm_rsh_args or hydra's extra args may add them.
		{args: []string{"-x", "-o", "StrictHostKeyChecking=no", "-p", "2222", "root@job-1.job", "\"/usr/bin/hydra_pmi_proxy\"", "--control-port", "job-0.job:1234"},
			host: "job-1.job", command: []string{"\"/usr/bin/hydra_pmi_proxy\"", "--control-port", "job-0.job:1234"}},
		{args: []string{"--", "-host-", "cmd"}, host: "-host-", command: []string{"cmd"}},
		{args: nil, wantErr: "no host"},
		{args: []string{"-x"}, wantErr: "no host"},
		{args: []string{"job-1.job"}, wantErr: "no command"},
		{args: []string{"user@", "cmd"}, wantErr: "no command"},
	} {
		host, command, err := ParseArgs(tc.args)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want %q", tc.args, err, tc.wantErr)
			}
		case err != nil || host != tc.host || !cmp.Equal(command, tc.command):
			t.Errorf("%q: %q %q %v, want %q %q", tc.args, host, command, err, tc.host, tc.command)
		}
	}
}

func TestShellArgv(t *testing.T) {
	got := ShellArgv([]string{"PATH=/opt/ompi/bin:$PATH", ";", "export", "PATH", ";", "orted", "-mca", "x", "\"1 2\""})
	want := []string{"/bin/sh", "-c", "PATH=/opt/ompi/bin:$PATH ; export PATH ; orted -mca x \"1 2\""}
	if !cmp.Equal(got, want) {
		t.Errorf("ShellArgv = %q, want %q", got, want)
	}
}

// logs collects a server's log lines.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// pipe serves one connection of s over net.Pipe and returns the client's end and a channel
// closed once the server is done.
func pipe(s *Server) (net.Conn, <-chan struct{}) {
	client, server := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.ServeConn(context.Background(), server)
	}()
	return client, done
}

func TestRunStreamsOutputAndExitCode(t *testing.T) {
	var got Request
	s := &Server{Key: jobKey, Exec: func(_ context.Context, req Request, stdout, stderr io.Writer) (int, error) {
		got = req
		fmt.Fprint(stdout, "out 1\n")
		fmt.Fprint(stderr, "err 1\n")
		fmt.Fprint(stdout, "out 2\n")
		return 3, nil
	}}
	conn, done := pipe(s)
	want := Request{Argv: []string{"orted", "--daemonize"}, Dir: "/workspace", Env: []string{"A=1", "B=x=y"}}
	var stdout, stderr bytes.Buffer
	code, err := Run(context.Background(), conn, jobKey, want, &stdout, &stderr)
	<-done
	if err != nil || code != 3 {
		t.Fatalf("Run = %d, %v; want 3", code, err)
	}
	if stdout.String() != "out 1\nout 2\n" || stderr.String() != "err 1\n" {
		t.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("request (-sent +received):\n%s", d)
	}
}

func TestWrongKeyIsRefusedAndLogged(t *testing.T) {
	var log logs
	ran := false
	s := &Server{Key: jobKey, Logf: log.logf, Exec: func(context.Context, Request, io.Writer, io.Writer) (int, error) {
		ran = true
		return 0, nil
	}}
	for _, req := range []Request{{Argv: []string{"true"}}, {Ping: true}} {
		conn, done := pipe(s)
		_, err := Run(context.Background(), conn, otherKey, req, io.Discard, io.Discard)
		<-done
		if !errors.Is(err, ErrRefused) {
			t.Errorf("%+v with another job's key: %v, want ErrRefused", req, err)
		}
	}
	if ran {
		t.Error("the server ran a command for a client with the wrong key")
	}
	if got := log.String(); strings.Count(got, "MPI agent: refused a connection from pipe: wrong key") != 2 {
		t.Errorf("log %q, want each refusal said", got)
	}
}

func TestRequestIsBoundToNonceAndKey(t *testing.T) {
	nonce := bytes.Repeat([]byte{1}, NonceBytes)
	payload, err := requestFrame(jobKey, nonce, Request{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openRequest(jobKey, nonce, payload); err != nil {
		t.Fatalf("the request as sent: %v", err)
	}
	// Replayed to a connection of another nonce.
	if _, err := openRequest(jobKey, bytes.Repeat([]byte{2}, NonceBytes), payload); !errors.Is(err, errWrongKey) {
		t.Errorf("replayed under another nonce: %v, want refused", err)
	}
	// Altered on the way.
	altered := bytes.Replace(payload, []byte(`"true"`), []byte(`"reboot"`), 1)
	if _, err := openRequest(jobKey, nonce, altered); !errors.Is(err, errWrongKey) {
		t.Errorf("altered: %v, want refused", err)
	}
	for name, p := range map[string][]byte{"short": payload[:10], "no command": mustFrame(t, Request{})} {
		if _, err := openRequest(jobKey, nonce, p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func mustFrame(t *testing.T, req Request) []byte {
	t.Helper()
	p, err := requestFrame(jobKey, bytes.Repeat([]byte{1}, NonceBytes), req)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPingRunsNothing(t *testing.T) {
	s := &Server{Key: jobKey, Exec: func(context.Context, Request, io.Writer, io.Writer) (int, error) {
		t.Error("a ping ran a command")
		return 1, nil
	}}
	conn, done := pipe(s)
	code, err := Run(context.Background(), conn, jobKey, Request{Ping: true}, io.Discard, io.Discard)
	<-done
	if err != nil || code != 0 {
		t.Errorf("ping = %d, %v; want 0", code, err)
	}
}

func TestCommandThatCannotStart(t *testing.T) {
	s := &Server{Key: jobKey, Exec: func(context.Context, Request, io.Writer, io.Writer) (int, error) {
		return 0, errors.New("exec: no such file")
	}}
	conn, done := pipe(s)
	_, err := Run(context.Background(), conn, jobKey, Request{Argv: []string{"x"}}, io.Discard, io.Discard)
	<-done
	if err == nil || !strings.Contains(err.Error(), "could not run the command: exec: no such file") {
		t.Errorf("Run = %v", err)
	}
}

// A client that goes away (mpirun ended or was stopped) ends the command on the server.
func TestClientGoneEndsCommand(t *testing.T) {
	started, ended := make(chan struct{}), make(chan struct{})
	s := &Server{Key: jobKey, Exec: func(ctx context.Context, _ Request, stdout, _ io.Writer) (int, error) {
		close(started)
		<-ctx.Done()
		close(ended)
		return 137, nil
	}}
	conn, done := pipe(s)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := Run(ctx, conn, jobKey, Request{Argv: []string{"sleep", "inf"}}, io.Discard, io.Discard)
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want canceled", err)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the command still runs after its client went away")
	}
	<-done
}

func TestNotAnAgent(t *testing.T) {
	client, server := net.Pipe()
	go func() {
		_, _ = server.Write([]byte("SSH-2.0-OpenSSH_9.2\r\n........"))
		_ = server.Close()
	}()
	if _, err := Run(context.Background(), client, jobKey, Request{Argv: []string{"true"}}, io.Discard, io.Discard); err == nil {
		t.Error("Run talked to an sshd as if it were the agent")
	}
}

func TestFrameBound(t *testing.T) {
	if _, _, err := readFrame(bytes.NewReader([]byte{frameStdout, 0xff, 0xff, 0xff, 0xff})); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("readFrame of a 4 GiB frame = %v, want refused before reading it", err)
	}
	if err := writeFrame(io.Discard, frameStdout, make([]byte, maxFrame+1)); err == nil {
		t.Error("writeFrame wrote a frame over the bound")
	}
	// Output larger than a frame is cut into several.
	var buf bytes.Buffer
	w := (&frameWriter{w: &buf}).stream(frameStdout)
	if n, err := w.Write(make([]byte, maxFrame+10)); err != nil || n != maxFrame+10 {
		t.Fatalf("Write = %d, %v", n, err)
	}
	var total int
	for buf.Len() > 0 {
		_, p, err := readFrame(&buf)
		if err != nil {
			t.Fatal(err)
		}
		total += len(p)
	}
	if total != maxFrame+10 {
		t.Errorf("%d bytes in the frames, want %d", total, maxFrame+10)
	}
}

// loopback serves s on a loopback port, with real processes, until stop or the test's end;
// dial connects to it.
func loopback(t *testing.T, s *Server) (dial func() net.Conn, stop func() error) {
	t.Helper()
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	stop = sync.OnceValue(func() error {
		cancel()
		return <-served
	})
	t.Cleanup(func() { _ = stop() })
	return func() net.Conn {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return conn
	}, stop
}

// Real processes over loopback: the server runs the words as a remote shell would.
func TestLoopbackShell(t *testing.T) {
	var log logs
	dial, stop := loopback(t, &Server{Key: jobKey, Exec: ShellExec([]string{"POD_VAR=from-pod", "PATH=" + os.Getenv("PATH")}, nil), Logf: log.logf})
	ctx := context.Background()
	dir := t.TempDir()
	var stdout, stderr testbuf.Buffer
	conn := dial()
	// The words as mpirun hands them to a remote shell.
	words := []string{"echo", "$POD_VAR", "$SENT", "in", "$(pwd);", "echo", "oops", ">&2;", "exit", "7"}
	code, err := Run(ctx, conn, jobKey, Request{Argv: words, Dir: dir, Env: []string{"SENT=sent"}}, &stdout, &stderr)
	if err != nil || code != 7 {
		t.Fatalf("Run = %d, %v; want 7", code, err)
	}
	if want := "from-pod sent in " + dir + "\n"; stdout.String() != want || stderr.String() != "oops\n" {
		t.Errorf("stdout %q, stderr %q; want %q, %q", stdout.String(), stderr.String(), want, "oops\n")
	}

	// A signal ends the command as a shell says it: 128+signal.
	if code, err := Run(ctx, dial(), jobKey, Request{Argv: []string{"kill", "-TERM", "$$"}}, io.Discard, io.Discard); err != nil || code != 128+15 {
		t.Errorf("killed by SIGTERM: %d, %v; want 143", code, err)
	}

	// A wrong key, over TCP.
	if _, err := Run(ctx, dial(), otherKey, Request{Argv: []string{"touch", dir + "/pwned"}}, io.Discard, io.Discard); !errors.Is(err, ErrRefused) {
		t.Errorf("wrong key over TCP: %v, want ErrRefused", err)
	}
	if _, err := os.Stat(dir + "/pwned"); err == nil {
		t.Error("a client with the wrong key ran a command")
	}
	if !strings.Contains(log.String(), "refused a connection from 127.0.0.1:") {
		t.Errorf("log %q, want the refusal with the peer's address", log.String())
	}
	if err := stop(); err != nil {
		t.Errorf("Serve = %v after ctx ended, want nil", err)
	}
}

// A client that goes away kills what its command started too, not only the shell.
func TestLoopbackClientGoneKillsTheGroup(t *testing.T) {
	dial, _ := loopback(t, &Server{Key: jobKey, Exec: ShellExec([]string{"PATH=" + os.Getenv("PATH")}, nil)})
	conn := dial()
	pidFile := t.TempDir() + "/pid"
	var stdout testbuf.Buffer
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A daemon in the background and the shell waiting for it, as a launch line may leave.
		_, _ = Run(runCtx, conn, jobKey, Request{Argv: []string{"sleep", "300", "&", "echo", "$!", ">", pidFile, ";", "echo", "up;", "wait"}}, &stdout, io.Discard)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for stdout.String() != "up\n" {
		if time.Now().After(deadline) {
			t.Fatalf("the command never started: %q", stdout.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	<-done
	proc := "/proc/" + strings.TrimSpace(string(b))
	for time.Now().Before(deadline) {
		st, err := os.ReadFile(proc + "/stat")
		// Gone, or a zombie waiting for its reaper.
		if err != nil || strings.Contains(string(st), ") Z ") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("the background sleep %s still runs after its client went away", proc)
}
