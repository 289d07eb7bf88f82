package stage

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

// Two attempts of rank 0 under `stage run`: the first saves a checkpoint and fails; the second
// finds it restored, is told its attempt and the checkpoint, and the log archive of the first
// numbers it as logs --attempt does.
func TestStageRunCheckpoints(t *testing.T) {
	s := s3fake.Start(t, s3fake.Options{})
	dir := filepath.Join(t.TempDir(), "ckpt")
	env := s.Env()
	env[s3layout.EnvJobID], env[s3layout.EnvJobUID], env[jobspec.EnvNodeRank] = "train", "uid-1", "0"
	env[s3layout.EnvStageCheckpointDir] = dir
	env[s3layout.EnvPodName] = "train-0-aaaaa"
	script := `echo "attempt=$TAO_ATTEMPT dir=$TAO_CHECKPOINT_DIR resume=$TAO_RESUME_CHECKPOINT"; ` +
		`if [ -z "$TAO_RESUME_CHECKPOINT" ]; then echo step-7 > "$TAO_CHECKPOINT_DIR/step-7.pt"; exit 3; fi; cat "$TAO_RESUME_CHECKPOINT"`
	out, _, err := run(env, "run", "--", "sh", "-c", script)
	if code, _ := exitcode.PassedThrough(err); code != 3 || !strings.Contains(out, "attempt=1 dir="+dir+" resume=\n") {
		t.Fatalf("first attempt: %v\n%s", err, out)
	}
	// The next pod starts with an empty directory, as a new pod does.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	env[s3layout.EnvPodName] = "train-0-bbbbb"
	out, errOut, err := run(env, "run", "--", "sh", "-c", script)
	if err != nil || !strings.Contains(out, "attempt=2 dir="+dir+" resume="+filepath.Join(dir, "step-7.pt")+"\nstep-7\n") {
		t.Fatalf("second attempt: %v\n%s\n%s", err, out, errOut)
	}
	if !strings.Contains(errOut, "restored 1 complete unit, 1 file (7 B) of 1 rank") || !strings.Contains(errOut, "(file step-7.pt, 1 file, 7 B)") {
		t.Errorf("stderr:\n%s", errOut)
	}
	// The attempt's archive says it too, before the command's lines.
	archived := s.Get(s3layout.LogArchiveKey("results/train/uid-1/", 0, "train-0-bbbbb"))
	if !strings.HasPrefix(archived, "kubectl-tao: checkpoints: restored 1 complete unit") || !strings.Contains(archived, "\nstep-7\n") {
		t.Errorf("the second attempt's archive:\n%s", archived)
	}
}

// An attempt whose restore fails still leaves its archive, saying why: `logs --attempt 1` shows
// it, and the next attempt, told 2, is the second there too.
func TestStageRunFailedRestoreIsArchived(t *testing.T) {
	s := s3fake.Start(t, s3fake.Options{})
	env := s.Env()
	env[s3layout.EnvJobID], env[s3layout.EnvJobUID], env[jobspec.EnvNodeRank] = "train", "uid-1", "0"
	env[s3layout.EnvStageCheckpointDir] = filepath.Join(t.TempDir(), "ckpt")
	env[s3layout.EnvPodName] = "train-0-aaaaa"
	manifest := s3layout.CheckpointManifestKey("results/train/uid-1/", 0)
	s.Put(manifest, `{"version":9,"rank":0,"files":[]}`)
	script := `echo "attempt=$TAO_ATTEMPT"`
	out, _, err := run(env, "run", "--", "sh", "-c", script)
	if code, _ := exitcode.PassedThrough(err); code != s3layout.ExitStageIn || out != "" {
		t.Fatalf("a failed restore: %v, stdout %q", err, out)
	}
	archived := s.Get(s3layout.LogArchiveKey("results/train/uid-1/", 0, "train-0-aaaaa"))
	if !strings.HasPrefix(archived, "kubectl-tao: ") || !strings.Contains(archived, "version 9") {
		t.Errorf("the failed attempt's archive: %q", archived)
	}
	s.Put(manifest, `{"version":1,"rank":0,"files":[]}`)
	env[s3layout.EnvPodName] = "train-0-bbbbb"
	if out, errOut, err := run(env, "run", "--", "sh", "-c", script); err != nil || out != "attempt=2\n" {
		t.Fatalf("the next attempt: %v, stdout %q\n%s", err, out, errOut)
	}
	if keys := s.Keys(s3layout.LogArchiveRankPrefix("results/train/uid-1/", 0)); len(keys) != 2 {
		t.Errorf("archives %q, want both attempts'", keys)
	}
}

// With --no-log-archive no log is kept, but every attempt is recorded: the second attempt is
// still told 2, and the checkpoints are restored.
func TestStageRunCheckpointsWithoutLogArchive(t *testing.T) {
	s := s3fake.Start(t, s3fake.Options{})
	dir := filepath.Join(t.TempDir(), "ckpt")
	env := s.Env()
	env[s3layout.EnvJobID], env[s3layout.EnvJobUID], env[jobspec.EnvNodeRank] = "train", "uid-1", "0"
	env[s3layout.EnvStageCheckpointDir] = dir
	env[s3layout.EnvStageGracePeriod] = "60"
	script := `echo "attempt=$TAO_ATTEMPT resume=$TAO_RESUME_CHECKPOINT"; echo x > "$TAO_CHECKPOINT_DIR/a.pt"`
	for i, pod := range []string{"train-0-aaaaa", "train-0-bbbbb"} {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		resume := ""
		if i > 0 {
			resume = filepath.Join(dir, "a.pt")
		}
		runAttempt(t, env, pod, script, i+1, resume)
	}
	if keys := s.Keys(s3layout.LogArchivePrefix("results/train/uid-1/")); len(keys) != 0 {
		t.Errorf("--no-log-archive archived %q", keys)
	}
	if keys := s.Keys(s3layout.CheckpointAttemptsPrefix("results/train/uid-1/", 0)); len(keys) != 2 {
		t.Errorf("attempt records %q, want 2", keys)
	}
}

// On a --volume nothing is restored or uploaded: the attempts are recorded on the volume and
// the command is told its attempt and the newest complete checkpoint there (a file cut short is
// passed over).
func TestStageRunCheckpointsOnVolume(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	env := map[string]string{
		s3layout.EnvStageCheckpointDir: dir, s3layout.EnvStageCheckpointOnVolume: "1", jobspec.EnvNodeRank: "0",
	}
	script := `echo "attempt=$TAO_ATTEMPT resume=$TAO_RESUME_CHECKPOINT"; echo x > "$TAO_CHECKPOINT_DIR/step-$TAO_ATTEMPT.pt"`
	for i, pod := range []string{"train-0-aaaaa", "train-0-bbbbb"} {
		resume := ""
		if i > 0 {
			resume = filepath.Join(dir, "step-1.pt")
		}
		errOut := runAttempt(t, env, pod, script, i+1, resume)
		if !strings.Contains(errOut, "on the volume at "+dir) {
			t.Errorf("stderr:\n%s", errOut)
		}
		// Later attempts' files are newer.
		time.Sleep(10 * time.Millisecond)
	}
	// A newer file that is a torch.save zip cut short is not the checkpoint to resume from.
	if err := os.WriteFile(filepath.Join(dir, "step-9.pt"), []byte("PK\x03\x04half"), 0o644); err != nil {
		t.Fatal(err)
	}
	env[s3layout.EnvPodName] = "train-0-ccccc"
	out, _, err := run(env, "run", "--", "sh", "-c", `echo "attempt=$TAO_ATTEMPT resume=$TAO_RESUME_CHECKPOINT"`)
	if want := "attempt=3 resume=" + filepath.Join(dir, "step-2.pt") + "\n"; err != nil || out != want {
		t.Errorf("third attempt: %v, %q, want %q", err, out, want)
	}
}

// The checkpoints are not optional: an attempt that cannot restore them fails at once with the
// staging code, the command not run; a setting of the supervisor's own (the grace period, the
// rank) that submit never writes is its usage code.
func TestStageRunCheckpointErrors(t *testing.T) {
	s := s3fake.Start(t, s3fake.Options{})
	base := s.Env()
	base[s3layout.EnvJobID], base[s3layout.EnvJobUID] = "train", "uid-1"
	base[s3layout.EnvStageCheckpointDir] = "/ckpt"
	for name, tc := range map[string]struct {
		set     map[string]string
		wantErr string
		code    int
	}{
		"no credentials": {map[string]string{s3layout.EnvSecretKey: ""}, s3layout.EnvSecretKey, s3layout.ExitStageIn},
		"relative dir":   {map[string]string{s3layout.EnvStageCheckpointDir: "ckpt"}, "--checkpoint-dir", s3layout.ExitStageIn},
		"bad keep":       {map[string]string{s3layout.EnvStageCheckpointKeep: "0"}, s3layout.EnvStageCheckpointKeep, s3layout.ExitStageIn},
		"bad grace":      {map[string]string{s3layout.EnvStageGracePeriod: "30s"}, s3layout.EnvStageGracePeriod, s3layout.ExitStageRun},
		"bad pattern":    {map[string]string{s3layout.EnvStageCheckpointPatterns: "a/*.pt"}, "--checkpoint-pattern", s3layout.ExitStageIn},
		"bad manifest":   {nil, "version 9", s3layout.ExitStageIn},
		"bad rank":       {map[string]string{jobspec.EnvNodeRank: "x"}, "not a rank", s3layout.ExitStageRun},
	} {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range tc.set {
				env[k] = v
			}
			env[s3layout.EnvStageCheckpointDir] = strings.Replace(env[s3layout.EnvStageCheckpointDir], "/ckpt", t.TempDir(), 1)
			if name == "bad manifest" {
				s.Put(s3layout.CheckpointManifestKey("results/train/uid-1/", 0), `{"version":9,"rank":0,"files":[]}`)
				defer s.Put(s3layout.CheckpointManifestKey("results/train/uid-1/", 0), `{"version":1,"rank":0,"files":[]}`)
			}
			out, errOut, err := run(env, "run", "--", "sh", "-c", "echo ran")
			if code, _ := exitcode.PassedThrough(err); code != tc.code || !strings.Contains(errOut, tc.wantErr) || strings.Contains(out, "ran") {
				t.Errorf("exit %d (%v), want %d; stdout %q, stderr:\n%s", code, err, tc.code, out, errOut)
			}
			if strings.Contains(errOut, s.SecretKey) {
				t.Errorf("the secret in the error: %s", errOut)
			}
		})
	}
}

// A command that succeeded but whose last checkpoints could not be uploaded exits 202, as for
// outputs; one that failed keeps its own code.
func TestStageRunCheckpointFlushFails(t *testing.T) {
	s := s3fake.Start(t, s3fake.Options{Wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/checkpoints/") {
				s3fake.WriteError(w, http.StatusForbidden, "AccessDenied")
				return
			}
			h.ServeHTTP(w, r)
		})
	}})
	env := s.Env()
	env[s3layout.EnvJobID], env[s3layout.EnvJobUID] = "train", "uid-1"
	env[s3layout.EnvStageCheckpointDir] = t.TempDir()
	_, errOut, err := run(env, "run", "--", "sh", "-c", `echo x > "$TAO_CHECKPOINT_DIR/last.pt"`)
	if code, _ := exitcode.PassedThrough(err); code != s3layout.ExitStageOut || !strings.Contains(errOut, "kubectl-tao: checkpoints: the final upload failed") {
		t.Errorf("success, flush failed: %v\n%s", err, errOut)
	}
	_, errOut, err = run(env, "run", "--", "sh", "-c", `echo y > "$TAO_CHECKPOINT_DIR/last.pt"; exit 4`)
	if code, _ := exitcode.PassedThrough(err); code != 4 || !strings.Contains(errOut, "checkpoints: the final upload failed") {
		t.Errorf("failure, flush failed: %v\n%s", err, errOut)
	}
}

// runAttempt runs script under `stage run --no-log-archive` as pod, wants it told attempt and
// resume ("attempt=N resume=PATH"), and returns its stderr.
func runAttempt(t *testing.T, env map[string]string, pod, script string, attempt int, resume string) string {
	t.Helper()
	env[s3layout.EnvPodName] = pod
	out, errOut, err := run(env, "run", "--no-log-archive", "--", "sh", "-c", script)
	if want := "attempt=" + strconv.Itoa(attempt) + " resume=" + resume + "\n"; err != nil || out != want {
		t.Fatalf("attempt %d: %v, stdout %q, want %q\n%s", attempt, err, out, want, errOut)
	}
	return errOut
}
