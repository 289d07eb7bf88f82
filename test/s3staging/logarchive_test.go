//go:build e2e

package s3staging

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/test/s3server"
)

// wrapper is a staged job's container command for command with outputs, as the kubelet runs
// it: the "$$" escapes undone, the built binary as the supervisor.
func wrapper(command []string, outputs []string, noArchive bool) []string {
	s := jobspec.Spec{Command: command, Nodes: 1, Staging: &jobspec.Staging{Outputs: outputs, NoLogArchive: noArchive}}
	return asKubeletRuns(jobspec.ContainerCommand(s))
}

// asKubeletRuns undoes the "$$" escapes and puts the built binary where the init container
// installs the supervisor.
func asKubeletRuns(argv []string) []string {
	for i, a := range argv {
		argv[i] = strings.ReplaceAll(a, "$$", "$")
	}
	if argv[0] == s3layout.StagerBinary {
		argv[0] = binary
	}
	return argv
}

type wrapped struct {
	code           int
	stdout, stderr string
}

// runWrapper runs argv with the pod's environment; during, when set, runs meanwhile.
func runWrapper(t *testing.T, env []string, argv []string, during func(p *os.Process)) wrapped {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), jobspec.EnvStager + "=" + binary}, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if during != nil {
		during(cmd.Process)
	}
	err := cmd.Wait()
	r := wrapped{stdout: out.String(), stderr: errOut.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return r
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The staged wrapper with the real binary against the S3 test server: each way the command
// can end leaves the rank's log at its archive key, with the same bytes the container printed
// (stdout and stderr lines), beside the outputs; the exit code is the command's.
func TestWrapperArchivesTheLog(t *testing.T) {
	srv := s3server.Start(t)
	srv.MakeBucket(t, "bucket")
	for _, tc := range []struct {
		name, script string
		rank         string
		signal       bool
		wantCode     int
		wantLog      string
	}{
		{"success", `echo "step 1"; sleep 0.1; echo "warn" >&2; sleep 0.1; printf 'done'; echo model > "$OUT/model"`, "", false, 0, "step 1\nwarn\ndone"},
		{"failure, rank 1", `echo "step 1"; sleep 0.1; echo "Traceback: boom" >&2; exit 1`, "1", false, 1, "step 1\nTraceback: boom\n"},
		// bash reports the kill on stderr: "/bin/bash: line 1: PID Killed  sh -c ...".
		{"killed by SIGKILL in a child (the OOM killer)", `echo "allocating"; sh -c 'kill -9 $$'; exit $?`, "", false, 137, "allocating\n/bin/bash: line 1: "},
		{"SIGTERM: the checkpoint's lines are kept, uploaded after the signal",
			// The stop reaches the whole process group: a sleep in the foreground would die of it
			// and bash would say "Terminated"; one in the background goes silently.
			`trap 'echo "got TERM, checkpointing"; echo ckpt > "$OUT/model"; exit 143' TERM; echo training; while :; do sleep 0.05 & wait $!; done`,
			"", true, 143, "training\ngot TERM, checkpointing\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uid := "uid-" + strings.NewReplacer(" ", "-", ",", "", ":", "", "(", "", ")", "").Replace(tc.name)
			out := t.TempDir()
			env := append(srv.Env("bucket"), "TAO_JOB_ID=train", "TAO_JOB_UID="+uid, "OUT="+out,
				s3layout.EnvOutputs+"="+out)
			// Rank 1 runs in a pod that knows its name (TAO_POD_NAME, one object per attempt);
			// the others as a pod spec from before it did (one object per rank).
			pod := ""
			if tc.rank != "" {
				pod = "train-" + tc.rank + "-x7k2p"
				env = append(env, jobspec.EnvNodeRank+"="+tc.rank, s3layout.EnvPodName+"="+pod)
			}
			var during func(p *os.Process)
			if tc.signal {
				during = func(p *os.Process) {
					// The command is running (its first line is in the periodic upload or not;
					// waiting on the output file is enough: nothing is there yet).
					time.Sleep(500 * time.Millisecond)
					if err := p.Signal(syscall.SIGTERM); err != nil {
						t.Error(err)
					}
				}
			}
			r := runWrapper(t, env, wrapper([]string{tc.script}, []string{out}, false), during)
			if r.code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout %q\nstderr:\n%s", r.code, tc.wantCode, r.stdout, r.stderr)
			}
			rank := 0
			if tc.rank == "1" {
				rank = 1
			}
			prefix, _ := s3layout.ResultsPrefix("train", uid)
			got := string(srv.Get(t, "bucket", s3layout.LogArchiveKey(prefix, rank, pod)))
			// bash's report of the kill carries a PID: only its start is compared. It comes on
			// stderr right after the child's line on stdout, with no pause between: the archive
			// holds the two pipes' bytes as they were read, so either may come first.
			killReport := tc.wantCode == 137 && strings.Contains(got, "Killed") &&
				(strings.HasPrefix(got, tc.wantLog) || strings.HasPrefix(got, "/bin/bash: line 1: ") && strings.HasSuffix(got, "\nallocating\n"))
			if got != tc.wantLog && !killReport {
				t.Errorf("archive %q, want %q\nstderr:\n%s", got, tc.wantLog, r.stderr)
			}
			// The container's own output is unchanged: the archive's lines, split by stream.
			for _, l := range strings.Split(strings.TrimSuffix(tc.wantLog, "\n"), "\n") {
				if !strings.Contains(r.stdout+r.stderr, l) {
					t.Errorf("the container did not print %q: stdout %q, stderr %q", l, r.stdout, r.stderr)
				}
			}
			if strings.Contains(r.stdout, "kubectl-tao:") {
				t.Errorf("the wrapper wrote to stdout: %q", r.stdout)
			}
			if leaks := srv.Leaks(r.stdout, r.stderr); len(leaks) > 0 {
				t.Error("a credential was printed")
			}
		})
	}
}

// While the command runs, its log is refreshed in S3 (here every 300 ms instead of a minute,
// through the binary's flag), so a lost node loses at most the last interval.
func TestStageRunRefreshesTheArchive(t *testing.T) {
	srv := s3server.Start(t)
	srv.MakeBucket(t, "bucket")
	stop := filepath.Join(t.TempDir(), "stop")
	env := append(srv.Env("bucket"), "TAO_JOB_ID=train", "TAO_JOB_UID=uid-live", jobspec.EnvNodeRank+"=2", s3layout.EnvPodName+"=train-2-abcde")
	key := s3layout.LogArchiveKey("results/train/uid-live/", 2, "train-2-abcde")
	done := make(chan wrapped)
	go func() {
		done <- runWrapper(t, env, []string{binary, "stage", "run", "--interval", "300ms", "--",
			"/bin/sh", "-c", `echo "epoch 1"; while [ ! -e ` + stop + ` ]; do sleep 0.05; done; echo "epoch 2"`}, nil)
	}()
	waitFor(t, "the first upload", func() bool {
		keys := srv.Keys(t, "bucket", key)
		return len(keys) == 1 && string(srv.Get(t, "bucket", key)) == "epoch 1\n"
	})
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.code != 0 || r.stdout != "epoch 1\nepoch 2\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if got := string(srv.Get(t, "bucket", key)); got != "epoch 1\nepoch 2\n" {
		t.Errorf("final archive %q", got)
	}
}

// A failed upload of the outputs after a successful command exits with the staging code, which
// --retries' policy fails at once; the rank's log is archived all the same (it is uploaded
// before stage out), and --no-log-archive leaves it out.
func TestWrapperStageOutFailureAndNoArchive(t *testing.T) {
	srv := s3server.Start(t)
	srv.MakeBucket(t, "bucket")
	env := append(srv.Env("bucket"), "TAO_JOB_ID=train", "TAO_JOB_UID=uid-lost", s3layout.EnvOutputs+"=/no/such/output")
	r := runWrapper(t, env, wrapper([]string{"echo trained"}, []string{"/no/such/output"}, false), nil)
	if r.code != s3layout.ExitStageOut || !strings.Contains(r.stderr, "kubectl-tao: stage out failed: output /no/such/output does not exist: nothing uploaded for it: the command succeeded but its outputs were not uploaded") {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if got := string(srv.Get(t, "bucket", "results/train/uid-lost/.kubectl-tao/logs/rank-0.log")); got != "trained\n" {
		t.Errorf("archive %q", got)
	}

	env = append(srv.Env("bucket"), "TAO_JOB_ID=train", "TAO_JOB_UID=uid-off", s3layout.EnvOutputs+"="+t.TempDir())
	r = runWrapper(t, env, wrapper([]string{"echo trained"}, []string{"/unused"}, true), nil)
	if r.code != 0 || r.stdout != "trained\n" {
		t.Fatalf("--no-log-archive: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if keys := srv.Keys(t, "bucket", "results/train/uid-off/.kubectl-tao/"); len(keys) != 0 {
		t.Errorf("--no-log-archive uploaded %q", keys)
	}
}

// A retried rank runs in a new pod: its archive is a new object, and the failed attempt's log,
// the one that says why it was retried, is still there beside it.
func TestStageRunKeepsEachAttempt(t *testing.T) {
	srv := s3server.Start(t)
	srv.MakeBucket(t, "bucket")
	prefix := "results/train/uid-retried/"
	for i, pod := range []string{"train-0-first", "train-0-second"} {
		env := append(srv.Env("bucket"), "TAO_JOB_ID=train", "TAO_JOB_UID=uid-retried", jobspec.EnvNodeRank+"=0", s3layout.EnvPodName+"="+pod)
		r := runWrapper(t, env, []string{binary, "stage", "run", "--", "/bin/sh", "-c", fmt.Sprintf("echo attempt %d; exit %d", i+1, 1-i)}, nil)
		if r.code != 1-i {
			t.Fatalf("attempt %d: exit %d, stderr %q", i+1, r.code, r.stderr)
		}
	}
	keys := srv.Keys(t, "bucket", s3layout.LogArchivePrefix(prefix))
	want := []string{s3layout.LogArchiveKey(prefix, 0, "train-0-first"), s3layout.LogArchiveKey(prefix, 0, "train-0-second")}
	if !slices.Equal(keys, want) {
		t.Fatalf("archived %q, want %q", keys, want)
	}
	for i, k := range want {
		if got, w := string(srv.Get(t, "bucket", k)), fmt.Sprintf("attempt %d\n", i+1); got != w {
			t.Errorf("%s holds %q, want %q", k, got, w)
		}
	}
}

// The staged wrapper and the real `stage run`, told to stop while a command runs that saves a
// checkpoint and exits 0 on SIGTERM: the attempt exits 143, said once; the checkpoint and the
// log are uploaded; the stopped attempt's outputs are not.
func TestWrapperStoppedAttemptIsNotDone(t *testing.T) {
	srv := s3server.Start(t)
	srv.MakeBucket(t, "bucket")
	dir := t.TempDir()
	out, ckpt, ready := filepath.Join(dir, "out"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "ready")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	script := `trap 'echo ckpt > "$TAO_CHECKPOINT_DIR/step-3.tlt"; echo model > "$OUT/model"; echo saved; exit 0' TERM
echo training; touch "$READY"; while :; do sleep 0.05 & wait $!; done`
	s := jobspec.Spec{Command: []string{script}, Nodes: 1,
		Staging: &jobspec.Staging{Outputs: []string{out}, Checkpoints: &jobspec.Checkpoints{Dir: ckpt, Keep: 2}}}
	argv := asKubeletRuns(jobspec.ContainerCommand(s))
	env := append(srv.Env("bucket"), "TAO_JOB_ID=train", "TAO_JOB_UID=uid-stopped", "OUT="+out, "READY="+ready,
		s3layout.EnvOutputs+"="+out, s3layout.EnvStageCheckpointDir+"="+ckpt, s3layout.EnvStageCheckpointKeep+"=2",
		s3layout.EnvPodName+"=train-0-aaaaa")
	r := runWrapper(t, env, argv, func(p *os.Process) {
		waitFor(t, "the command", func() bool { _, err := os.Stat(ready); return err == nil })
		if err := p.Signal(syscall.SIGTERM); err != nil {
			t.Error(err)
		}
	})
	const stopped = "kubectl-tao: the pod was told to stop (SIGTERM): the command exited 0; exiting 143 so that this attempt does not count as done\n"
	if r.code != 143 || strings.Count(r.stderr, "told to stop") != 1 || !strings.Contains(r.stderr, stopped) ||
		!strings.Contains(r.stderr, "kubectl-tao: stage out skipped: the outputs of a stopped attempt are not the run's results\n") {
		t.Fatalf("exit %d, want 143\nstdout %q\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	prefix := "results/train/uid-stopped/"
	// The archive also holds the checkpoints' own lines (the restore, the uploads).
	if got := string(srv.Get(t, "bucket", s3layout.LogArchiveKey(prefix, 0, "train-0-aaaaa"))); !strings.Contains(got, "\ntraining\nsaved\n") {
		t.Errorf("archive %q", got)
	}
	var checkpoints, outputs []string
	for _, k := range srv.Keys(t, "bucket", prefix) {
		switch {
		case strings.HasPrefix(k, s3layout.CheckpointFilesPrefix(prefix, 0)):
			checkpoints = append(checkpoints, strings.TrimPrefix(k, s3layout.CheckpointFilesPrefix(prefix, 0)))
		case !strings.HasPrefix(k, prefix+s3layout.ToolDir+"/"):
			outputs = append(outputs, k)
		}
	}
	if !slices.Equal(checkpoints, []string{"step-3.tlt"}) || len(outputs) != 0 {
		t.Errorf("checkpoints %q, outputs %q: want step-3.tlt and no output of the stopped attempt", checkpoints, outputs)
	}
}
