package supervisor

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

// Default 30 s and 2 m both leave every phase time; a phase's deadline never comes before the
// one before it, and the margin before the kubelet's SIGKILL stays.
func TestBudget(t *testing.T) {
	for _, tc := range []struct {
		grace time.Duration
		want  Phases
	}{
		{0, Phases{Command: 15 * time.Second, Checkpoints: 25500 * time.Millisecond, Archive: 28500 * time.Millisecond}},
		{30 * time.Second, Phases{Command: 15 * time.Second, Checkpoints: 25500 * time.Millisecond, Archive: 28500 * time.Millisecond}},
		{2 * time.Minute, Phases{Command: time.Minute, Checkpoints: 102 * time.Second, Archive: 114 * time.Second}},
		{10 * time.Minute, Phases{Command: 5 * time.Minute, Checkpoints: 555 * time.Second, Archive: 570 * time.Second}},
		{5 * time.Second, Phases{Command: 2500 * time.Millisecond, Checkpoints: 2500 * time.Millisecond, Archive: 4 * time.Second}},
	} {
		got := Budget{Grace: tc.grace}.Phases()
		if got != tc.want {
			t.Errorf("grace %s: %+v, want %+v", tc.grace, got, tc.want)
		}
		g := tc.grace
		if g == 0 {
			g = DefaultGrace
		}
		if got.Command <= 0 || got.Command > got.Checkpoints || got.Checkpoints >= got.Archive || got.Archive >= g {
			t.Errorf("grace %s: phases out of order or past the grace period: %+v", tc.grace, got)
		}
		if g >= 30*time.Second && (got.Checkpoints-got.Command < 10*time.Second || got.Archive-got.Checkpoints < 2*time.Second) {
			t.Errorf("grace %s: a phase is left too little: %+v", tc.grace, got)
		}
	}
}

// attempt is one supervised run's outcome.
type attempt struct {
	code           int
	stdout, stderr string
}

// supervise runs script under sh with env as the pod's environment; during, when set, runs
// meanwhile with the signal channel.
func supervise(t *testing.T, env map[string]string, script string, during func(sigs chan<- os.Signal)) attempt {
	t.Helper()
	return superviseWith(t, env, script, during, nil)
}

// superviseWith is supervise with the Supervisor changed by set first.
func superviseWith(t *testing.T, env map[string]string, script string, during func(sigs chan<- os.Signal), set func(*Supervisor)) attempt {
	t.Helper()
	// The stacks' files and the sitecustomize go to the temporary directory.
	t.Setenv("TMPDIR", t.TempDir())
	var out, errOut bytes.Buffer
	sigs := make(chan os.Signal, 1)
	s := &Supervisor{Argv: []string{"sh", "-c", script}, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut,
		Signals: sigs, Getenv: func(k string) string { return env[k] }, Interval: time.Hour}
	if set != nil {
		set(s)
	}
	done := make(chan int, 1)
	go func() { done <- s.Run(context.Background()) }()
	if during != nil {
		during(sigs)
	}
	select {
	case code := <-done:
		return attempt{code: code, stdout: out.String(), stderr: errOut.String()}
	case <-time.After(30 * time.Second):
		t.Fatalf("the supervisor did not return; stderr:\n%s", errOut.String())
	}
	return attempt{}
}

// staged is an S3 with one input object, and the environment of rank 0 of run train/uid-1
// that downloads it to $DIR/in and uploads $DIR/out.
func staged(t *testing.T) (*s3fake.Server, map[string]string, string) {
	return stagedWith(t, s3fake.Options{})
}

func stagedWith(t *testing.T, o s3fake.Options) (*s3fake.Server, map[string]string, string) {
	s := s3fake.Start(t, o)
	s.Put("datasets/train.txt", "data\n")
	dir := t.TempDir()
	env := s.Env()
	env[s3layout.EnvJobID], env[s3layout.EnvJobUID] = "train", "uid-1"
	env[s3layout.EnvInputs] = s3layout.EncodeInputs([]s3layout.Input{{Path: filepath.Join(dir, "in"),
		Source: s3layout.URL{Bucket: s.Bucket, Key: "datasets/train.txt"}}})
	env[s3layout.EnvOutputs] = s3layout.EncodeOutputs([]string{filepath.Join(dir, "out")})
	env[s3layout.EnvPodName] = "train-0-aaaaa"
	env["DIR"] = dir
	return s, env, dir
}

// outputs are the names of the run's uploaded results (their keys end in the container path),
// the tool's own keys left out.
func outputs(s *s3fake.Server) []string {
	var out []string
	for _, k := range s.Keys("results/train/uid-1/") {
		if !strings.HasPrefix(k, "results/train/uid-1/"+s3layout.ToolDir+"/") {
			out = append(out, path.Base(k))
		}
	}
	return out
}

// In order: the inputs are there before the command runs, the outputs are uploaded after it,
// even when it failed; the exit code is the command's, or the staging code of the step that
// failed first when the command succeeded.
func TestPhasesAndExitCodes(t *testing.T) {
	// The command reads its input and writes an output: the order shows in what S3 holds.
	const train = `mkdir -p "$DIR/out" && cat "$DIR/in" > "$DIR/out/model.txt" && echo trained; exit "$RC"`
	denyOutputs := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/model.txt") {
				s3fake.WriteError(w, http.StatusForbidden, "AccessDenied")
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	for _, tc := range []struct {
		name      string
		rc        string
		opts      s3fake.Options
		noInput   bool
		rank      string
		code      int
		ran       bool
		uploaded  []string
		stderrHas string
	}{
		{"success", "0", s3fake.Options{}, false, "", 0, true, []string{"model.txt"}, ""},
		{"command fails: outputs all the same, its code", "3", s3fake.Options{}, false, "", 3, true, []string{"model.txt"}, ""},
		{"stage in fails: no command, no outputs", "0", s3fake.Options{}, true, "", s3layout.ExitStageIn, false, nil,
			"kubectl-tao: stage in failed: "},
		{"stage out fails after a success: its code", "0", s3fake.Options{Wrap: denyOutputs}, false, "", s3layout.ExitStageOut, true, nil,
			"the command succeeded but its outputs were not uploaded"},
		{"both fail: the command's code", "4", s3fake.Options{Wrap: denyOutputs}, false, "", 4, true, nil,
			"kubectl-tao: stage out failed after the command failed (exit code 4): "},
		{"rank 1 of a multi-node job stages nothing out", "0", s3fake.Options{}, false, "1", 0, true, nil, ""},
		{"rank 0 of a multi-node job does", "0", s3fake.Options{}, false, "0", 0, true, []string{"model.txt"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, env, _ := stagedWith(t, tc.opts)
			env["RC"] = tc.rc
			env[jobspec.EnvNodeRank] = tc.rank
			if tc.noInput {
				env[s3layout.EnvInputs] = s3layout.EncodeInputs([]s3layout.Input{{Path: filepath.Join(env["DIR"], "in"),
					Source: s3layout.URL{Bucket: s.Bucket, Key: "datasets/missing.txt"}}})
			}
			r := supervise(t, env, "RC="+tc.rc+" DIR="+env["DIR"]+"; "+train, nil)
			if r.code != tc.code || (r.stdout == "trained\n") != tc.ran || !strings.Contains(r.stderr, tc.stderrHas) {
				t.Errorf("exit %d, stdout %q, want exit %d, ran %v; stderr:\n%s", r.code, r.stdout, tc.code, tc.ran, r.stderr)
			}
			if got := outputs(s); !slices.Equal(got, tc.uploaded) {
				t.Errorf("uploaded %q, want %q", got, tc.uploaded)
			}
		})
	}
}

// A stop while the command runs reaches it (it may save and exit 0); the attempt then ends
// 128+signal, said once, and its outputs are not the run's results.
func TestStoppedAttemptIsNotDone(t *testing.T) {
	const saves = `trap 'mkdir -p "$DIR/out"; echo m > "$DIR/out/model.txt"; echo saved; exit 0' TERM INT
touch "$DIR/ready"; while :; do sleep 0.05; done`
	for _, tc := range []struct {
		sig     syscall.Signal
		rank    string
		code    int
		skipped bool
	}{
		{syscall.SIGTERM, "", 143, true},
		{syscall.SIGINT, "", 130, true},
		{syscall.SIGTERM, "1", 143, false},
	} {
		t.Run(tc.sig.String()+" rank "+tc.rank, func(t *testing.T) {
			s, env, dir := staged(t)
			env[jobspec.EnvNodeRank] = tc.rank
			r := supervise(t, env, "DIR="+dir+"; "+saves, func(sigs chan<- os.Signal) {
				waitFile(t, filepath.Join(dir, "ready"))
				sigs <- tc.sig
			})
			name := map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT"}[tc.sig]
			line := "kubectl-tao: the pod was told to stop (" + name + "): the command exited 0; exiting " + strconv.Itoa(tc.code) +
				" so that this attempt does not count as done\n"
			const skipped = "kubectl-tao: stage out skipped: the outputs of a stopped attempt are not the run's results\n"
			if r.code != tc.code || r.stdout != "saved\n" || strings.Count(r.stderr, "told to stop") != 1 || !strings.Contains(r.stderr, line) ||
				strings.Contains(r.stderr, skipped) != tc.skipped {
				t.Errorf("exit %d, stdout %q; stderr:\n%s", r.code, r.stdout, r.stderr)
			}
			if got := outputs(s); len(got) != 0 {
				t.Errorf("a stopped attempt uploaded %q", got)
			}
		})
	}
}

// A stop during stage in ends the attempt there: the command never runs.
func TestStopDuringStageIn(t *testing.T) {
	requested := make(chan struct{}, 1)
	slow := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "datasets/") {
				select {
				case requested <- struct{}{}:
				default:
				}
				select {
				case <-r.Context().Done():
				case <-time.After(20 * time.Second):
				}
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	s, env, _ := stagedWith(t, s3fake.Options{Wrap: slow})
	r := supervise(t, env, "echo ran", func(sigs chan<- os.Signal) {
		<-requested
		sigs <- syscall.SIGTERM
	})
	if r.code != 143 || r.stdout != "" || !strings.Contains(r.stderr, "kubectl-tao: signalled during stage in: the command was not run\n") {
		t.Errorf("exit %d, stdout %q; stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if got := outputs(s); len(got) != 0 {
		t.Errorf("uploaded %q", got)
	}
}

// The stop reaches every process of the command's group, not only its first; one that ignores
// it is killed, group and all, when the command's share of the grace period is spent.
func TestStopReachesTheGroupAndKillsAtTheBudget(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{s3layout.EnvStageGracePeriod: "2"}
	// The child sleeps in the background; the shell ignores SIGTERM and waits for ever.
	script := `DIR=` + dir + `; sleep 60 & echo $! > "$DIR/child"; trap '' TERM; touch "$DIR/ready"; while :; do sleep 0.05; done`
	start := time.Now()
	var stopped time.Time
	r := supervise(t, env, script, func(sigs chan<- os.Signal) {
		waitFile(t, filepath.Join(dir, "ready"))
		stopped = time.Now()
		sigs <- syscall.SIGTERM
	})
	took := time.Since(stopped)
	if r.code != 143 || !strings.Contains(r.stderr, "the command exited 137; exiting 143") {
		t.Errorf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	// Killed at half the 2 s grace period, not before, and long before the child's 60 s.
	if took < time.Second || took > 10*time.Second {
		t.Errorf("the command was killed %s after the stop (started %s before)", took, stopped.Sub(start))
	}
	raw, err := os.ReadFile(filepath.Join(dir, "child"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the command's child %d outlived the attempt", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Without a stop the supervisor is the command: its output and code pass through, and nothing
// it has no settings for runs.
func TestNothingToStage(t *testing.T) {
	r := supervise(t, map[string]string{}, "echo out; echo err >&2; exit 5", nil)
	if r.code != 5 || r.stdout != "out\n" || !strings.HasSuffix(r.stderr, "err\n") {
		t.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, err := os.Stat(path); err != nil; _, err = os.Stat(path) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
