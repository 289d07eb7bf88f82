package stage

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

// signalledRun is `stage run -- sh -c script` with env, its signals from sigs.
func signalledRun(t *testing.T, env map[string]string, script string, sigs chan os.Signal) (o *RunOptions, out, errOut *bytes.Buffer) {
	t.Helper()
	out, errOut = &bytes.Buffer{}, &bytes.Buffer{}
	o = &RunOptions{Interval: time.Hour, getenv: func(k string) string { return env[k] }, signals: sigs,
		IOStreams: genericiooptions.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: errOut}}
	cmd := &cobra.Command{}
	if err := cmd.Flags().Parse([]string{"--", "sh", "-c", script}); err != nil {
		t.Fatal(err)
	}
	if err := o.Complete(cmd, cmd.Flags().Args()); err != nil {
		t.Fatal(err)
	}
	return o, out, errOut
}

// runSignalled runs `stage run -- sh -c script` with env, sends sig once the script has
// created $READY (nothing when sig is 0), and returns its exit code and stderr. The script
// sees env's RC as $RC.
func runSignalled(t *testing.T, env map[string]string, script string, sig syscall.Signal) (int, string) {
	t.Helper()
	// The command's environment is this process's: its variables go in the script.
	ready := filepath.Join(t.TempDir(), "ready")
	sigs := make(chan os.Signal, 1)
	o, _, errOut := signalledRun(t, env, "READY="+ready+" RC="+env["RC"]+"; "+script, sigs)
	done := make(chan error, 1)
	go func() { done <- o.Run(context.Background()) }()
	if sig != 0 {
		deadline := time.Now().Add(10 * time.Second)
		for _, err := os.Stat(ready); err != nil; _, err = os.Stat(ready) {
			if time.Now().After(deadline) {
				t.Fatal("the command did not start")
			}
			time.Sleep(10 * time.Millisecond)
		}
		sigs <- sig
	}
	select {
	case err := <-done:
		code, ok := exitcode.PassedThrough(err)
		if err != nil && !ok {
			code = int(exitcode.Of(err))
		}
		return code, errOut.String()
	case <-time.After(20 * time.Second):
		t.Fatal("stage run did not return")
	}
	return 0, ""
}

// rankZero is an S3 and the environment of pod train-0-aaaaa of run train/uid-1, keeping its
// checkpoints there.
func rankZero(t *testing.T) (*s3fake.Server, map[string]string) {
	s := s3fake.Start(t, s3fake.Options{})
	env := s.Env()
	env[s3layout.EnvJobID], env[s3layout.EnvJobUID], env[jobspec.EnvNodeRank] = "train", "uid-1", "0"
	env[s3layout.EnvStageCheckpointDir] = filepath.Join(t.TempDir(), "ckpt")
	env[s3layout.EnvPodName] = "train-0-aaaaa"
	return s, env
}

// Once the pod is told to stop, `stage run` exits 128+signal whatever the command's code, and
// says so once when that is not the command's own code; the last checkpoint and the log are
// uploaded all the same. Without a signal the command's code stands.
func TestStageRunStoppedAttemptIsNotDone(t *testing.T) {
	// Saves a checkpoint on the signal and exits $RC, as a training loop handling a preemption.
	const saves = `trap 'echo saved > "$TAO_CHECKPOINT_DIR/last.pt"; echo saved; exit "$RC"' TERM INT
echo training; touch "$READY"; while :; do sleep 0.05; done`
	line := func(sig string, rc, code int) string {
		return "kubectl-tao: the pod was told to stop (" + sig + "): the command exited " + strconv.Itoa(rc) + "; exiting " + strconv.Itoa(code) +
			" so that this attempt does not count as done\n"
	}
	for _, tc := range []struct {
		name   string
		script string
		rc     string
		sig    syscall.Signal
		code   int
		line   string
	}{
		{"saves and exits 0 on SIGTERM", saves, "0", syscall.SIGTERM, 143, line("SIGTERM", 0, 143)},
		{"saves and exits 1 on SIGINT", saves, "1", syscall.SIGINT, 130, line("SIGINT", 1, 130)},
		{"ended by SIGTERM: its own code, nothing more said", `echo training; touch "$READY"; exec sleep 30`, "0", syscall.SIGTERM, 143, ""},
		{"no signal: the command's 0", `echo x > "$TAO_CHECKPOINT_DIR/last.pt"; echo saved`, "0", 0, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, env := rankZero(t)
			env["RC"] = tc.rc
			code, errOut := runSignalled(t, env, tc.script, tc.sig)
			stopLines := 0
			for _, l := range strings.SplitAfter(errOut, "\n") {
				if strings.Contains(l, "told to stop") {
					stopLines++
					if l != tc.line {
						t.Errorf("stderr line %q, want %q", l, tc.line)
					}
				}
			}
			if code != tc.code || (tc.line != "") != (stopLines == 1) || stopLines > 1 {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, errOut)
			}
			const prefix = "results/train/uid-1/"
			if tc.script == saves || tc.sig == 0 {
				if keys := s.Keys(s3layout.CheckpointFilesPrefix(prefix, 0)); len(keys) != 1 || !strings.HasSuffix(keys[0], "/last.pt") {
					t.Errorf("checkpoints uploaded %q, want last.pt", keys)
				}
			}
			if archived := s.Get(s3layout.LogArchiveKey(prefix, 0, "train-0-aaaaa")); tc.sig != 0 && !strings.Contains(archived, "training\n") {
				t.Errorf("the stopped attempt's archive: %q", archived)
			}
		})
	}
}

// A stop that came while the checkpoints were restored leaves the command unrun and the
// attempt 128+signal, not the staging code a failed restore has: a stop is not a storage fault.
func TestStageRunStoppedDuringRestore(t *testing.T) {
	s, env := rankZero(t)
	// A manifest the restore refuses stands in for one cut off by the stop.
	s.Put(s3layout.CheckpointManifestKey("results/train/uid-1/", 0), `{"version":9,"rank":0,"files":[]}`)
	sigs := make(chan os.Signal, 1)
	sigs <- syscall.SIGTERM
	o, out, errOut := signalledRun(t, env, "echo ran", sigs)
	err := o.Run(context.Background())
	code, _ := exitcode.PassedThrough(err)
	if code != 143 || out.String() != "" ||
		!strings.HasPrefix(errOut.String(), "kubectl-tao: the pod was told to stop (SIGTERM) before the command ran: exiting 143 (") {
		t.Errorf("exit %d (%v), stdout %q, stderr:\n%s", code, err, out.String(), errOut.String())
	}
}
