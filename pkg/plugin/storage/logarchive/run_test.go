package logarchive

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

// uploads records every upload's content, as the S3 object would hold it.
type uploads struct {
	mu   sync.Mutex
	got  []string
	fail bool
}

func (u *uploads) upload(_ context.Context, r io.ReaderAt, size int64) error {
	b := make([]byte, size)
	if _, err := r.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.fail {
		return errors.New("503 SlowDown")
	}
	u.got = append(u.got, string(b))
	return nil
}

func (u *uploads) all() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.got...)
}

type run struct {
	code           int
	stdout, stderr string
	log            string
	up             *uploads
	signalled      os.Signal
}

// start runs script under /bin/sh with an archive and a recording upload; during (when set)
// runs meanwhile with the signal channel.
func start(t *testing.T, ctx context.Context, argv []string, interval time.Duration, up *uploads, during func(chan<- os.Signal)) run {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "archive")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stdout, stderr, log testbuf.Buffer
	sigs := make(chan os.Signal, 1)
	r := &Runner{Argv: argv, Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Signals: sigs,
		Archive: f, Upload: up.upload, Interval: interval, Log: &log}
	done := make(chan int)
	go func() {
		code, _ := r.Run(ctx)
		done <- code
	}()
	if during != nil {
		during(sigs)
	}
	select {
	case code := <-done:
		return run{code: code, stdout: stdout.String(), stderr: stderr.String(), log: log.String(), up: up, signalled: r.Signalled}
	case <-time.After(20 * time.Second):
		t.Fatal("the runner did not return")
	}
	return run{}
}

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

func TestRunnerPassesOutputAndExitCodeAndArchives(t *testing.T) {
	for _, tc := range []struct {
		name    string
		argv    []string
		code    int
		stdout  string
		stderr  string
		archive string
	}{
		{"success", sh(`echo one; sleep 0.1; echo two >&2; sleep 0.1; printf three`), 0, "one\nthree", "two\n", "one\ntwo\nthree"},
		{"failure keeps its code", sh(`echo failing >&2; exit 3`), 3, "", "failing\n", "failing\n"},
		{"a child killed by SIGKILL (the OOM killer)", sh(`echo big; kill -9 $$`), 137, "big\n", "", "big\n"},
		{"not found", []string{"/no/such/program"}, 127, "", "", "/no/such/program"},
		{"not executable", []string{"/dev/null"}, 126, "", "", "/dev/null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := &uploads{}
			r := start(t, context.Background(), tc.argv, time.Hour, up, nil)
			if r.code != tc.code || r.stdout != tc.stdout || !strings.Contains(r.stderr, tc.stderr) || r.signalled != nil {
				t.Errorf("exit %d, stdout %q, stderr %q, signalled %v; want %d, %q, %q and no signal", r.code, r.stdout, r.stderr, r.signalled,
					tc.code, tc.stdout, tc.stderr)
			}
			got := up.all()
			if len(got) != 1 || !strings.Contains(got[0], tc.archive) {
				t.Errorf("uploads %q, want one holding %q", got, tc.archive)
			}
		})
	}
}

// Prepare runs before the command with the archive open: its notes and its environment reach
// the command's attempt; when it fails the command does not run, but the archive, holding the
// notes and the error, is uploaded all the same.
func TestRunnerPrepare(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		stdout  string
		archive string
	}{
		{"its environment reaches the command", nil, "resume=/ckpt/step-4.pt\n",
			"kubectl-tao: checkpoints: restored 1 files\nresume=/ckpt/step-4.pt\n"},
		{"its failure is archived, the command not run", errors.New("checkpoint restore: listing s3://b/: Forbidden"), "",
			"kubectl-tao: checkpoints: restored 1 files\nkubectl-tao: checkpoint restore: listing s3://b/: Forbidden\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := os.CreateTemp(t.TempDir(), "archive")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var stdout, stderr testbuf.Buffer
			up := &uploads{}
			notes := NewNotes(&stderr)
			ended := false
			r := &Runner{Argv: sh(`echo "resume=$RESUME"`), Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
				Archive: f, Upload: up.upload, Interval: time.Hour, Notes: notes, Ended: func() { ended = true },
				Prepare: func() ([]string, error) {
					_, _ = io.WriteString(notes, "kubectl-tao: checkpoints: restored 1 files\n")
					return []string{"RESUME=/ckpt/step-4.pt"}, tc.err
				}}
			code, err := r.Run(context.Background())
			if err != tc.err || code != 0 || stdout.String() != tc.stdout || ended != (tc.err == nil) {
				t.Errorf("Run = %d, %v, stdout %q, Ended run %v; want 0, %v, %q", code, err, stdout.String(), ended, tc.err, tc.stdout)
			}
			if got := up.all(); len(got) != 1 || got[0] != tc.archive {
				t.Errorf("uploads %q, want one: %q", got, tc.archive)
			}
		})
	}
}

func TestRunnerForwardsSIGTERMAndUploadsAfterIt(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	// The context is cancelled as main's is on SIGTERM: the final upload must happen anyway.
	ctx, cancel := context.WithCancel(context.Background())
	up := &uploads{}
	// The stop goes to the whole process group: a child of the shell (a sleep, in the
	// foreground or not) would die of it and the shell would say "Terminated", now or as it
	// exits. Neither the ready file (a redirection, not touch) nor the loop starts a process.
	r := start(t, ctx, sh(`trap 'echo checkpointing; exit 42' TERM; echo training; : >`+ready+`; while :; do :; done`),
		time.Hour, up, func(sigs chan<- os.Signal) {
			waitFile(t, ready)
			cancel()
			sigs <- syscall.SIGTERM
		})
	got := up.all()
	if r.code != 42 || r.stdout != "training\ncheckpointing\n" || len(got) != 1 || got[0] != "training\ncheckpointing\n" {
		t.Errorf("exit %d, stdout %q, uploads %q", r.code, r.stdout, got)
	}
	// The caller learns that the command was told to stop, whatever its exit code.
	if r.signalled != syscall.SIGTERM {
		t.Errorf("Signalled = %v, want SIGTERM", r.signalled)
	}
}

func TestRunnerSignalWithoutHandlerIs128PlusSignal(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	up := &uploads{}
	r := start(t, context.Background(), sh(`echo up; touch `+ready+`; exec sleep 30`), time.Hour, up, func(sigs chan<- os.Signal) {
		waitFile(t, ready)
		sigs <- syscall.SIGTERM
	})
	if got := up.all(); r.code != 143 || len(got) != 1 || got[0] != "up\n" {
		t.Errorf("exit %d, uploads %q; want 143 and the log", r.code, got)
	}
}

func TestRunnerRefreshesWhileRunning(t *testing.T) {
	up := &uploads{}
	r := start(t, context.Background(), sh(`echo a; sleep 0.5; echo b; sleep 0.5`), 100*time.Millisecond, up, nil)
	got := up.all()
	if r.code != 0 || len(got) < 3 || got[0] != "a\n" || got[len(got)-1] != "a\nb\n" {
		t.Fatalf("exit %d, uploads %q; want a, then a and b", r.code, got)
	}
	for i := 1; i < len(got)-1; i++ {
		if got[i] == got[i-1] {
			t.Errorf("upload %d repeats an unchanged archive: %q", i, got)
		}
	}
}

// A failed upload is a warning: the command's code stands.
func TestRunnerUploadFailureKeepsTheExitCode(t *testing.T) {
	up := &uploads{fail: true}
	r := start(t, context.Background(), sh(`echo x`), time.Hour, up, nil)
	if r.code != 0 || r.stdout != "x\n" || !strings.Contains(r.log, "log archive: the final upload failed: 503 SlowDown") {
		t.Errorf("exit %d, stdout %q, log %q", r.code, r.stdout, r.log)
	}
}

// A background process that keeps the output open does not keep the runner from ending.
func TestRunnerEndsWhenABackgroundChildHoldsTheOutput(t *testing.T) {
	began := time.Now()
	r := start(t, context.Background(), sh(`sleep 10 & echo main done`), time.Hour, &uploads{}, nil)
	if r.code != 0 || r.stdout != "main done\n" || time.Since(began) > 8*time.Second {
		t.Errorf("exit %d, stdout %q after %s", r.code, r.stdout, time.Since(began))
	}
}

func waitFile(t *testing.T, p string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(p); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", p)
}

// While the command still runs, its output is already out: a partial line on stdout and a line
// on stderr as soon as they are written, and the archive file holds every complete line (the
// partial one follows when its line ends or the command does).
func TestRunnerPassesOutputWhileTheCommandRuns(t *testing.T) {
	dir := t.TempDir()
	ready, proceed := filepath.Join(dir, "ready"), filepath.Join(dir, "proceed")
	f, err := os.Create(filepath.Join(dir, "archive"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stdout, stderr testbuf.Buffer
	r := &Runner{Argv: sh(`echo "step 1"; printf partial; echo "warn 1" >&2; touch ` + ready + `
while [ ! -e ` + proceed + ` ]; do sleep 0.02; done
echo " line"`), Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Signals: make(chan os.Signal),
		Archive: f, Upload: (&uploads{}).upload, Interval: time.Hour}
	done := make(chan int)
	go func() {
		code, _ := r.Run(context.Background())
		done <- code
	}()
	waitFile(t, ready)
	deadline := time.Now().Add(10 * time.Second)
	for stdout.String() != "step 1\npartial" || stderr.String() != "warn 1\n" {
		if time.Now().After(deadline) {
			t.Fatalf("while the command runs: stdout %q, stderr %q; want %q and %q", stdout.String(), stderr.String(), "step 1\npartial", "warn 1\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for {
		b, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if string(b) == "step 1\nwarn 1\n" || string(b) == "warn 1\nstep 1\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("archive while the command runs: %q, want its two complete lines", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case code := <-done:
		t.Fatalf("the runner returned %d before the command was let go", code)
	default:
	}
	if err := os.WriteFile(proceed, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 || stdout.String() != "step 1\npartial line\n" {
			t.Errorf("exit %d, stdout %q", code, stdout.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the runner did not return")
	}
}
