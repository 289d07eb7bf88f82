package jobspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// fakeStager stands in for `kubectl-tao stage in|out`: it appends its argv (byte for byte,
// "|"-separated) and the staging variables it sees to $LOG, and exits with $FAKE_IN_RC or
// $FAKE_OUT_RC. With FAKE_IN_SLEEP=1, stage in waits for a signal, as a long download would.
// `stage run -- CMD...` execs CMD, unlogged (the real one, which also archives the log, is
// tested in the logarchive package and against the S3 test server in test/s3staging).
const fakeStager = `#!/bin/bash
if [ "$2" = run ]; then
  shift 2
  [ -z "$TAO_STAGE_CHECKPOINT_DIR" ] || echo "stager: run $1 rank=$NODE_RANK ckpt=$TAO_STAGE_CHECKPOINT_DIR keep=$TAO_STAGE_CHECKPOINT_KEEP grace=$TAO_STAGE_GRACE_PERIOD pod=$TAO_POD_NAME" >> "$LOG"
  [ "$1" != --no-log-archive ] || shift
  [ "$1" = -- ] || exit 98
  shift
  [ -z "$FAKE_RUN_RC" ] || exit "$FAKE_RUN_RC"
  exec "$@"
fi
printf 'stager:' >> "$LOG"; printf '%s|' "$@" >> "$LOG"
printf ' job=%s uid=%s ak=%s in=%s out=%s\n' "$TAO_JOB_ID" "$TAO_JOB_UID" "$ACCESS_KEY" "${TAO_STAGE_INPUTS//$'\n'/;}" "$TAO_STAGE_OUTPUTS" >> "$LOG"
case "$2" in
in)
  if [ -n "$FAKE_IN_SLEEP" ]; then
    trap 'kill $pid; echo "stager: got TERM" >> "$LOG"; exit 143' TERM
    sleep 10 & pid=$!
    echo "stager: downloading" >> "$LOG"
    wait $pid
  fi
  exit "${FAKE_IN_RC:-0}";;
out) exit "${FAKE_OUT_RC:-0}";;
esac
exit 99
`

// secretValues are what the kubelet would resolve each valueFrom to.
var secretValues = map[string]string{
	s3layout.EnvAccessKey: testAccessKey, s3layout.EnvSecretKey: testSecretKey,
	s3layout.EnvBucket: "results-bucket", s3layout.EnvJobUID: "0b6c-uid",
}

type stagedRun struct {
	stdout, stderr string
	code           int
	log            []string
}

// runStaged runs a staged job's container as the kubelet would (env expanded in order,
// valueFrom resolved, JOB_COMPLETION_INDEX appended for indexed pods) with the fake stager at
// $TAO_STAGER. extra adds or overrides variables; during, when set, runs while the wrapper does
// (to signal it) and is handed the process and the log's path.
func runStaged(t *testing.T, s Spec, index string, extra map[string]string, during func(p *os.Process, log string)) stagedRun {
	t.Helper()
	if _, err := os.Stat(Shell); err != nil {
		t.Skipf("%s is not on this machine", Shell)
	}
	dir := t.TempDir()
	stager := filepath.Join(dir, "kubectl-tao")
	if err := os.WriteFile(stager, []byte(fakeStager), 0o755); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "log")
	c := Build(s).Job.Spec.Template.Spec.Containers[0]
	environ, vars := kubeletEnv(c, index, func(e corev1.EnvVar) string { return secretValues[e.Name] })
	for i, kv := range environ {
		if strings.HasPrefix(kv, EnvStager+"=") {
			environ[i] = EnvStager + "=" + stager
			vars[EnvStager] = stager
		}
	}
	environ = append(environ, "PATH="+os.Getenv("PATH"), "LOG="+logPath)
	for k, v := range extra {
		environ = append(environ, k+"="+v)
	}
	argv := make([]string, len(c.Command))
	for i, a := range c.Command {
		argv[i] = kubeletExpand(a, vars)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = environ
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if during != nil {
		during(cmd.Process, logPath)
	}
	err := cmd.Wait()
	r := stagedRun{stdout: out.String(), stderr: errOut.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(logPath)
	r.log = strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	return r
}

// waitForLine waits until the log has a line starting with prefix.
func waitForLine(t *testing.T, log, prefix string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		raw, _ := os.ReadFile(log)
		for _, l := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(l, prefix) {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no line %q in the log", prefix)
}

// record is a bash command string that logs a line and exits with $CMD_RC.
const record = `echo "cmd: ran" >> "$LOG"; exit "${CMD_RC:-0}"`

const (
	wantIn  = "stager:stage|in| job=train uid=0b6c-uid ak=" + testAccessKey + " in=/data/train=s3://datasets/coco/train/;/specs/train.yaml=s3://datasets/specs/$(dino).yaml out=/results"
	wantOut = "stager:stage|out| job=train uid=0b6c-uid ak=" + testAccessKey + " in=/data/train=s3://datasets/coco/train/;/specs/train.yaml=s3://datasets/specs/$(dino).yaml out=/results"
)

func TestStagedWrapperOrderAndExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		wantCode int
		wantLog  []string
		stderr   string
	}{
		{"success", nil, 0, []string{wantIn, "cmd: ran", wantOut}, ""},
		{"command fails: stage out still runs, the command's code", map[string]string{"CMD_RC": "3"}, 3, []string{wantIn, "cmd: ran", wantOut}, ""},
		{"stage in fails: no command, no stage out, the staging code", map[string]string{"FAKE_IN_RC": "5"}, 201, []string{wantIn},
			"kubectl-tao: stage in failed (exit code 5): the command was not run\n"},
		{"stage out fails after success: the staging code", map[string]string{"FAKE_OUT_RC": "7"}, 202, []string{wantIn, "cmd: ran", wantOut},
			"kubectl-tao: stage out failed (exit code 7): the command succeeded but its outputs were not uploaded\n"},
		{"both fail: the command's code", map[string]string{"CMD_RC": "3", "FAKE_OUT_RC": "7"}, 3, []string{wantIn, "cmd: ran", wantOut},
			"kubectl-tao: stage out failed (exit code 7) after the command failed (exit code 3)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := stagedSpec()
			s.Command = []string{record}
			r := runStaged(t, s, "", tc.env, nil)
			if r.stderr != tc.stderr {
				t.Errorf("stderr = %q, want %q", r.stderr, tc.stderr)
			}
			if r.code != tc.wantCode || strings.Join(r.log, "\n") != strings.Join(tc.wantLog, "\n") {
				t.Errorf("exit %d, log:\n%s\nwant exit %d, log:\n%s", r.code, strings.Join(r.log, "\n"), tc.wantCode, strings.Join(tc.wantLog, "\n"))
			}
		})
	}
}

func TestStagedWrapperPassesArgvExactly(t *testing.T) {
	for _, nodes := range []int{1, 3} {
		s := stagedSpec()
		s.Nodes = nodes
		s.Command = append([]string{self(t)}, tricky...)
		r := runStaged(t, s, "0", map[string]string{echoEnv: "1"}, nil)
		var got struct {
			Args []string `json:"args"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 {
			t.Fatalf("nodes=%d: exit %d, stdout %q: %v", nodes, r.code, r.stdout, err)
		}
		if strings.Join(got.Args, "\x00") != strings.Join(tricky, "\x00") {
			t.Errorf("nodes=%d: args %q, want %q", nodes, got.Args, tricky)
		}
		if len(r.log) != 2 || !strings.HasPrefix(r.log[0], "stager:stage|in|") || !strings.HasPrefix(r.log[1], "stager:stage|out|") {
			t.Errorf("nodes=%d: log %q", nodes, r.log)
		}
	}
	// A bash string keeps the SDK's meaning: bash parses it, in the pod.
	s := stagedSpec()
	s.Command = []string{`printf '%s|' "$TAO_JOB_ID" 'it'"'"'s' "$(echo sub)"`}
	if r := runStaged(t, s, "", nil, nil); r.stdout != "train|it's|sub|" || r.code != 0 {
		t.Errorf("string command: exit %d, stdout %q", r.code, r.stdout)
	}
}

// A SIGTERM or SIGINT reaches the command, which may checkpoint for as long as it needs; the
// attempt then ends 128+signal whatever the command's code, and its outputs are not uploaded:
// the pod was told to stop, so the Job must retry the index, never record it done.
func TestStagedWrapperStoppedAttemptIsNotDone(t *testing.T) {
	// A training loop that checkpoints on the signal, takes its time doing so, and exits $CMD_RC.
	const onSignal = `trap 'echo "cmd: got SIG" >> "$LOG"; sleep 0.3; echo "cmd: checkpointed" >> "$LOG"; exit "${CMD_RC:-0}"' TERM INT
echo "cmd: training" >> "$LOG"
while :; do sleep 0.05; done`
	// One that has no handler: the signal ends it.
	const noHandler = `echo "cmd: training" >> "$LOG"; exec sleep 30`
	const skipped = "kubectl-tao: stage out skipped: the outputs of a stopped attempt are not the run's results\n"
	exited := func(sig string, rc, code int) string {
		return "kubectl-tao: the pod was told to stop (" + sig + "): the command exited " + itoa(rc) + "; exiting " + itoa(code) +
			" so that this attempt does not count as done\n"
	}
	checkpointed := []string{wantIn, "cmd: training", "cmd: got SIG", "cmd: checkpointed"}
	for _, tc := range []struct {
		name    string
		mutate  func(*Spec)
		index   string
		command string
		sig     syscall.Signal
		env     map[string]string
		code    int
		stderr  string
		log     []string
	}{
		{"SIGTERM, exit 0: 143, no stage out", nil, "", onSignal, syscall.SIGTERM, nil, 143,
			exited("SIGTERM", 0, 143) + skipped, checkpointed},
		{"SIGTERM, exit 42: 143, no stage out", nil, "", onSignal, syscall.SIGTERM, map[string]string{"CMD_RC": "42"}, 143,
			exited("SIGTERM", 42, 143) + skipped, checkpointed},
		{"SIGINT, exit 0: 130", nil, "", onSignal, syscall.SIGINT, nil, 130,
			exited("SIGINT", 0, 130) + skipped, checkpointed},
		{"SIGTERM ends the command: its 143, no stage out", nil, "", noHandler, syscall.SIGTERM, nil, 143,
			skipped, []string{wantIn, "cmd: training"}},
		{"--no-log-archive: the same", func(s *Spec) { s.Staging.NoLogArchive = true }, "", onSignal, syscall.SIGTERM, nil, 143,
			exited("SIGTERM", 0, 143) + skipped, checkpointed},
		{"multi-node rank 0: no stage out", func(s *Spec) { s.Nodes = 2 }, "0", onSignal, syscall.SIGTERM, nil, 143,
			exited("SIGTERM", 0, 143) + skipped, checkpointed},
		{"multi-node rank 1: 143, it never stages out", func(s *Spec) { s.Nodes = 2 }, "1", onSignal, syscall.SIGTERM, nil, 143,
			exited("SIGTERM", 0, 143), checkpointed},
		{"inputs only: 143", func(s *Spec) { s.Staging.Outputs = nil }, "", onSignal, syscall.SIGTERM, nil, 143,
			exited("SIGTERM", 0, 143), append([]string{strings.TrimSuffix(wantIn, "/results")}, checkpointed[1:]...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := stagedSpec()
			if tc.mutate != nil {
				tc.mutate(&s)
			}
			s.Command = []string{tc.command}
			r := runStaged(t, s, tc.index, tc.env, func(p *os.Process, log string) {
				waitForLine(t, log, "cmd: training")
				if err := p.Signal(tc.sig); err != nil {
					t.Error(err)
				}
			})
			if r.code != tc.code || r.stderr != tc.stderr || strings.Join(r.log, "\n") != strings.Join(tc.log, "\n") {
				t.Errorf("exit %d, stderr %q, log:\n%s\nwant exit %d, stderr %q, log:\n%s", r.code, r.stderr, strings.Join(r.log, "\n"),
					tc.code, tc.stderr, strings.Join(tc.log, "\n"))
			}
		})
	}
}

func TestStagedWrapperSIGTERMDuringStageIn(t *testing.T) {
	s := stagedSpec()
	s.Command = []string{record}
	r := runStaged(t, s, "", map[string]string{"FAKE_IN_SLEEP": "1"}, func(p *os.Process, log string) {
		waitForLine(t, log, "stager: downloading")
		_ = p.Signal(syscall.SIGTERM)
	})
	want := []string{wantIn, "stager: downloading", "stager: got TERM"}
	if r.code != 143 || strings.Join(r.log, "\n") != strings.Join(want, "\n") {
		t.Errorf("exit %d, log:\n%s\nwant 143 and no command, no stage out", r.code, strings.Join(r.log, "\n"))
	}
}

func TestStagedWrapperMultiNodeUploadsFromRankZero(t *testing.T) {
	for index, wantLines := range map[string]int{"0": 3, "1": 2} {
		s := stagedSpec()
		s.Name, s.Nodes = "train", 2
		s.Command = []string{record}
		r := runStaged(t, s, index, map[string]string{"CMD_RC": "4"}, nil)
		if r.code != 4 || len(r.log) != wantLines || r.log[1] != "cmd: ran" {
			t.Errorf("rank %s: exit %d, log %q; want exit 4 and %d lines", index, r.code, r.log, wantLines)
		}
	}
}

// Without outputs nor a `stage run`, the command runs as the wrapper's child (the wrapper stays
// to fail a stopped attempt) and its exit code is the wrapper's.
func TestStagedWrapperInputsOnlyRunsTheCommand(t *testing.T) {
	s := stagedSpec()
	s.Staging.Outputs = nil
	s.Command = []string{`echo "cmd: pid $$" >> "$LOG"; exit 6`}
	var pid int
	r := runStaged(t, s, "", nil, func(p *os.Process, _ string) { pid = p.Pid })
	if r.code != 6 || len(r.log) != 2 || !strings.HasPrefix(r.log[1], "cmd: pid ") || r.log[1] == "cmd: pid "+itoa(pid) || r.stderr != "" {
		t.Errorf("exit %d, stderr %q, log %q (wrapper pid %d): want 6 from a child of the wrapper", r.code, r.stderr, r.log, pid)
	}
	if strings.Contains(ContainerCommand(s)[2], "stage out") {
		t.Error("inputs-only wrapper runs stage out")
	}
}

// With outputs the command runs under `stage run` (the log archive) unless --no-log-archive;
// without outputs it is exec'ed as before, archive or not.
func TestStagedWrapperRunsTheCommandUnderStageRun(t *testing.T) {
	for _, tc := range []struct {
		name      string
		outputs   []string
		noArchive bool
		want      bool
	}{
		{"outputs", []string{"/results"}, false, true},
		{"outputs, --no-log-archive", []string{"/results"}, true, false},
		{"inputs only", nil, false, false},
	} {
		s := stagedSpec()
		s.Staging.Outputs, s.Staging.NoLogArchive = tc.outputs, tc.noArchive
		s.Command = []string{"python", "train.py"}
		script := stagedScript(s)
		if got := strings.Contains(script, `run "$TAO_STAGER" stage run -- "$@"`); got != tc.want {
			t.Errorf("%s: stage run in the wrapper = %v, want %v:\n%s", tc.name, got, tc.want, script)
		}
		s.Command = []string{"python train.py"}
		if got := strings.Contains(stagedScript(s), `run "$TAO_STAGER" stage run -- /bin/bash -c "$1"`); got != tc.want {
			t.Errorf("%s, bash string: stage run in the wrapper = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// With --checkpoint-dir every rank runs the command under `stage run` (which restores and keeps
// the checkpoints), with or without outputs and the log archive; stage out stays on rank 0, and
// a failed restore (201 from stage run) is the wrapper's exit code.
func TestStagedWrapperCheckpoints(t *testing.T) {
	s := stagedSpec()
	s.Name, s.Nodes = "ddp", 2
	s.Staging.Inputs = nil
	s.Staging.Checkpoints = &Checkpoints{Dir: "/ckpt", Keep: 3}
	s.Command = []string{`echo "cmd: rank $NODE_RANK"; exit 5`}
	for _, index := range []string{"0", "1"} {
		r := runStaged(t, s, index, map[string]string{"TAO_POD_NAME": "ddp-" + index + "-abcde"}, nil)
		want := []string{"stager: run -- rank=" + index + " ckpt=/ckpt keep=3 grace=30 pod=ddp-" + index + "-abcde"}
		if index == "0" {
			want = append(want, "stager:stage|out| job=ddp uid=0b6c-uid ak="+testAccessKey+" in= out=/results")
		}
		if r.code != 5 || strings.Join(r.log, "\n") != strings.Join(want, "\n") || r.stdout != "cmd: rank "+index+"\n" {
			t.Errorf("rank %s: exit %d, stdout %q, log %q; want 5, %q", index, r.code, r.stdout, r.log, want)
		}
	}

	s.Nodes, s.Staging.Outputs, s.Staging.NoLogArchive = 1, nil, true
	grace := 2 * time.Minute
	s.TerminationGracePeriod = &grace
	r := runStaged(t, s, "", nil, nil)
	if want := "stager: run --no-log-archive rank= ckpt=/ckpt keep=3 grace=120 pod="; r.code != 5 || len(r.log) != 1 || !strings.HasPrefix(r.log[0], want) {
		t.Errorf("checkpoints alone: exit %d, log %q, want 5 and %q", r.code, r.log, want)
	}
	if got := Build(s).Job.Spec.Template.Spec.TerminationGracePeriodSeconds; got == nil || *got != 120 {
		t.Errorf("terminationGracePeriodSeconds = %v, want 120", got)
	}
	r = runStaged(t, s, "", map[string]string{"FAKE_RUN_RC": "201"}, nil)
	if r.code != 201 || r.stdout != "" {
		t.Errorf("failed restore: exit %d, stdout %q; want 201 and the command not run", r.code, r.stdout)
	}
}

// checkpointsAndWorkdir gives a spec --checkpoint-dir dir and --workdir with --workdir-mount mount.
func checkpointsAndWorkdir(dir, mount string) func(*Spec) {
	return func(s *Spec) {
		s.Staging.Checkpoints = &Checkpoints{Dir: dir, Keep: 2}
		s.Workdir = &Workdir{MountPath: mount, SHA256: testWorkdirSum, StagerImage: s.Staging.StagerImage}
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestStagingValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate  func(*Spec)
		wantErr string
	}{
		"valid":            {func(*Spec) {}, ""},
		"existing secret":  {func(s *Spec) { s.Staging.Credentials, s.Staging.ExistingSecret = nil, "team-s3" }, ""},
		"bad secret name":  {func(s *Spec) { s.Staging.Credentials, s.Staging.ExistingSecret = nil, "Team_S3" }, `invalid --s3-secret "Team_S3"`},
		"nothing to stage": {func(s *Spec) { s.Staging.Inputs, s.Staging.Outputs = nil, nil }, "at least one --input, --output-path or --checkpoint-dir"},
		"checkpoints only": {func(s *Spec) {
			s.Staging.Inputs, s.Staging.Outputs, s.Staging.Checkpoints = nil, nil, &Checkpoints{Dir: "/ckpt", Keep: 1}
		}, ""},
		"checkpoints in outputs ok": {func(s *Spec) { s.Staging.Checkpoints = &Checkpoints{Dir: "/results/train", Keep: 2} }, ""},
		"relative checkpoint dir":   {func(s *Spec) { s.Staging.Checkpoints = &Checkpoints{Dir: "ckpt", Keep: 2} }, "--checkpoint-dir: "},
		"checkpoint dir root":       {func(s *Spec) { s.Staging.Checkpoints = &Checkpoints{Dir: "/", Keep: 2} }, "--checkpoint-dir: "},
		"checkpoint keep 0":         {func(s *Spec) { s.Staging.Checkpoints = &Checkpoints{Dir: "/ckpt", Keep: 0} }, "invalid --checkpoint-keep 0"},
		"checkpoint no pattern":     {func(s *Spec) { s.Staging.Checkpoints = &Checkpoints{Dir: "/ckpt", Keep: 2, Patterns: []string{}} }, "--checkpoint-pattern: no pattern"},
		"checkpoint pattern slash": {func(s *Spec) {
			s.Staging.Checkpoints = &Checkpoints{Dir: "/ckpt", Keep: 2, Patterns: []string{"a/*.pt"}}
		}, `--checkpoint-pattern "a/*.pt"`},
		"checkpoint pattern bad": {func(s *Spec) { s.Staging.Checkpoints = &Checkpoints{Dir: "/ckpt", Keep: 2, Patterns: []string{"[x"}} }, `--checkpoint-pattern "[x"`},
		"checkpoints on input": {func(s *Spec) { s.Staging.Checkpoints = &Checkpoints{Dir: "/data", Keep: 2} },
			"--checkpoint-dir /data and --input /data/train overlap"},
		"checkpoints on stager": {func(s *Spec) { s.Staging.Checkpoints = &Checkpoints{Dir: "/tao-stager", Keep: 2} }, "reserved for the stager binary"},
		"checkpoints on file": {func(s *Spec) {
			s.Staging.Checkpoints = &Checkpoints{Dir: "/specs", Keep: 2}
			s.Staging.Inputs = s.Staging.Inputs[:1]
			s.Files = []File{{Source: "t.yaml", ContainerPath: "/specs/train.yaml", Data: []byte("x")}}
		}, "--checkpoint-dir /specs overlaps --file /specs/train.yaml"},
		"checkpoints in the workdir": {checkpointsAndWorkdir("/workspace/ckpt", DefaultWorkdirMount),
			"--checkpoint-dir /workspace/ckpt and --workdir-mount /workspace overlap"},
		"workdir in the checkpoints":        {checkpointsAndWorkdir("/w", "/w/code/"), "--checkpoint-dir /w and --workdir-mount /w/code overlap"},
		"checkpoints beside the workdir ok": {checkpointsAndWorkdir("/workspace-ckpt", DefaultWorkdirMount), ""},
		"checkpoints on volume": {func(s *Spec) {
			s.Staging.Checkpoints = &Checkpoints{Dir: "/pvc/ckpt", Keep: 2}
			s.Volumes = []Volume{{Claim: "ckpts", MountPath: "/pvc"}}
		}, ""},
		"resume from S3 onto a volume": {func(s *Spec) {
			s.Staging.Checkpoints = &Checkpoints{Dir: "/pvc/ckpt", Keep: 2, FromJob: "old", FromUID: "uid-1"}
			s.Volumes = []Volume{{Claim: "ckpts", MountPath: "/pvc"}}
		}, "copy the old run's checkpoints onto the volume instead"},
		"no S3 with outputs": {func(s *Spec) {
			s.Staging.Checkpoints, s.Staging.NoS3, s.Staging.Credentials = &Checkpoints{Dir: "/pvc/ckpt", Keep: 2}, true, nil
			s.Volumes = []Volume{{Claim: "ckpts", MountPath: "/pvc"}}
		}, "internal error: staging without S3"},
		"checkpoints on ro volume": {func(s *Spec) {
			s.Staging.Checkpoints = &Checkpoints{Dir: "/pvc/ckpt", Keep: 2}
			s.Volumes = []Volume{{Claim: "ckpts", MountPath: "/pvc", ReadOnly: true}}
		}, "read-only --volume ckpts:/pvc"},
		"volume in checkpoints": {func(s *Spec) {
			s.Staging.Checkpoints = &Checkpoints{Dir: "/ckpt", Keep: 2}
			s.Volumes = []Volume{{Claim: "ckpts", MountPath: "/ckpt/shared"}}
		}, "holds the mount of --volume ckpts:/ckpt/shared"},
		"checkpoint env": {func(s *Spec) {
			s.Staging.Checkpoints = &Checkpoints{Dir: "/ckpt", Keep: 2}
			s.Env = []KeyValue{{"TAO_RESUME_CHECKPOINT", "x"}}
		}, `invalid --env "TAO_RESUME_CHECKPOINT": --checkpoint-dir sets it`},
		"grace 0":           {func(s *Spec) { g := time.Duration(0); s.TerminationGracePeriod = &g }, "invalid --termination-grace-period 0s: at least 1s"},
		"grace fraction":    {func(s *Spec) { g := 1500 * time.Millisecond; s.TerminationGracePeriod = &g }, "whole number of seconds"},
		"no image":          {func(s *Spec) { s.Staging.StagerImage = "" }, "--stager-image is empty"},
		"duplicate input":   {func(s *Spec) { s.Staging.Inputs = append(s.Staging.Inputs, s.Staging.Inputs[0]) }, "--input /data/train: the path is given more than once"},
		"nested inputs":     {func(s *Spec) { s.Staging.Inputs[1].Path = "/data/train/x" }, "are nested"},
		"sibling inputs ok": {func(s *Spec) { s.Staging.Inputs[1].Path = "/data/training" }, ""},
		"duplicate output":  {func(s *Spec) { s.Staging.Outputs = []string{"/r", "/r"} }, "--output-path /r: the path is given more than once"},
		"nested outputs":    {func(s *Spec) { s.Staging.Outputs = []string{"/r/a", "/r"} }, "are nested"},
		"relative output":   {func(s *Spec) { s.Staging.Outputs = []string{"results"} }, "must be absolute"},
		"stager dir":        {func(s *Spec) { s.Staging.Outputs = []string{"/tao-stager/x"} }, "reserved for the stager binary"},
		"volume on stager":  {func(s *Spec) { s.Volumes = []Volume{{Claim: "c", MountPath: "/tao-stager"}} }, "reserved for the stager binary"},
		"input on file": {func(s *Spec) {
			s.Files = []File{{Source: "t.yaml", ContainerPath: "/specs/train.yaml", Data: []byte("x")}}
		}, "overlaps --file /specs/train.yaml"},
		"input on ro volume":  {func(s *Spec) { s.Volumes = []Volume{{Claim: "ds", MountPath: "/data", ReadOnly: true}} }, "read-only --volume ds:/data"},
		"output on volume ok": {func(s *Spec) { s.Volumes = []Volume{{Claim: "results", MountPath: "/results"}} }, ""},
		"reserved env":        {func(s *Spec) { s.Env = []KeyValue{{"ACCESS_KEY", "x"}} }, `invalid --env "ACCESS_KEY": S3 staging sets it`},
		"job id env":          {func(s *Spec) { s.Env = []KeyValue{{"TAO_JOB_ID", "x"}} }, `invalid --env "TAO_JOB_ID"`},
		"reserved annotation": {func(s *Spec) { s.Annotations = []KeyValue{{s3layout.AnnotationOutputs, "[]"}} }, "reserved for kubectl-tao"},
		"missing credentials": {func(s *Spec) {
			s.Staging.Credentials = map[string]string{s3layout.EnvBucket: "results-bucket"}
		}, "S3 staging needs ACCESS_KEY, SECRET_KEY in the submitting shell"},
		"bad bucket":   {func(s *Spec) { s.Staging.Credentials[s3layout.EnvBucket] = "Bad_Bucket" }, "S3_BUCKET_NAME in the submitting shell"},
		"bad endpoint": {func(s *Spec) { s.Staging.Credentials[s3layout.EnvEndpoint] = "s3.example.com" }, "S3_ENDPOINT_URL must be an http:// or https:// URL"},
		"endpoint with password": {func(s *Spec) {
			s.Staging.Credentials[s3layout.EnvEndpoint] = "https://u:pw@s3.example.com"
		}, "must not carry a user or password"},
		// Found by FuzzParseEndpoint: submit took it, and the stager in the pod refused it.
		"endpoint with a path": {func(s *Spec) {
			s.Staging.Credentials[s3layout.EnvEndpoint] = "https://s3.example.com/bucket"
		}, "without a path, query or fragment"},
		"endpoint with an escaped host": {func(s *Spec) {
			s.Staging.Credentials[s3layout.EnvEndpoint] = "https://%250"
		}, "the host may not hold a %-escape"},
		"key on two lines": {func(s *Spec) { s.Staging.Credentials[s3layout.EnvSecretKey] = testSecretKey + "\n" }, "SECRET_KEY in the submitting shell spans several lines"},
	} {
		s := stagedSpec()
		tc.mutate(&s)
		err := s.Validate()
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.wantErr)
			continue
		}
		if strings.Contains(err.Error(), testSecretKey) || strings.Contains(err.Error(), testAccessKey) {
			t.Errorf("%s: the error quotes a credential: %v", name, err)
		}
	}
	// Every Job carries TAO_JOB_ID and TAO_JOB_UID, staged or not.
	s := validSpec()
	s.Env = []KeyValue{{"TAO_JOB_UID", "x"}}
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "sets it to the Job's name and UID") {
		t.Errorf("--env TAO_JOB_UID on an unstaged job: %v", err)
	}
}

// The contract on the objects rather than on the golden text.
func TestStagingContract(t *testing.T) {
	s := stagedSpec()
	objs := Build(s)
	pod := objs.Job.Spec.Template.Spec
	if len(pod.InitContainers) != 1 {
		t.Fatalf("init containers = %d", len(pod.InitContainers))
	}
	init := pod.InitContainers[0]
	if init.Name != s3layout.StagerContainer || init.Image != s.Staging.StagerImage ||
		strings.Join(init.Command, " ") != s3layout.StagerImageBinary+" stage install "+s3layout.StagerDir {
		t.Errorf("init container = %+v", init)
	}
	if len(objs.Children) != 1 {
		t.Fatalf("children = %d, want the Secret", len(objs.Children))
	}
	secret := objs.Children[0].(*corev1.Secret)
	if secret.Name != "train-s3" || string(secret.Data[s3layout.EnvSecretKey]) != testSecretKey || !*secret.Immutable {
		t.Errorf("secret = %+v", secret)
	}
	c := pod.Containers[0]
	seen := map[string]bool{}
	for _, e := range c.Env {
		seen[e.Name] = true
		for _, v := range []string{testAccessKey, testSecretKey, "results-bucket"} {
			if strings.Contains(e.Value, v) {
				t.Errorf("env %s carries a credential as a plain value", e.Name)
			}
		}
		switch e.Name {
		case s3layout.EnvAccessKey, s3layout.EnvSecretKey, s3layout.EnvBucket, s3layout.EnvEndpoint:
			ref := e.ValueFrom.SecretKeyRef
			if ref == nil || ref.Name != "train-s3" || ref.Key != e.Name || (e.Name == s3layout.EnvEndpoint) != (ref.Optional != nil && *ref.Optional) {
				t.Errorf("env %s = %+v, want a secretKeyRef to train-s3 (optional only for the endpoint)", e.Name, e.ValueFrom)
			}
		case s3layout.EnvJobUID:
			if e.ValueFrom.FieldRef.FieldPath != "metadata.labels['batch.kubernetes.io/controller-uid']" {
				t.Errorf("TAO_JOB_UID = %+v", e.ValueFrom)
			}
		}
	}
	for _, want := range append([]string{EnvStager, s3layout.EnvJobID, s3layout.EnvJobUID, s3layout.EnvInputs, s3layout.EnvOutputs}, s3layout.CredentialKeys...) {
		if !seen[want] {
			t.Errorf("env %s missing", want)
		}
	}
	for _, a := range c.Command {
		for _, v := range []string{testAccessKey, testSecretKey} {
			if strings.Contains(a, v) {
				t.Error("a credential is on the command line")
			}
		}
	}
	if objs.Job.Annotations[s3layout.AnnotationOutputs] != `["/results"]` || objs.Job.Annotations[s3layout.AnnotationS3Secret] != "train-s3" {
		t.Errorf("annotations = %v", objs.Job.Annotations)
	}
	if _, ok := pod.Containers[0].Resources.Limits[GPUResource]; !ok {
		t.Error("main container lost its GPU limit")
	}
	if _, ok := init.Resources.Limits[GPUResource]; ok {
		t.Error("the init container asks for GPUs")
	}
	ex := stagedSpec()
	ex.Staging.Credentials, ex.Staging.ExistingSecret = nil, "team-s3"
	if objs := Build(ex); len(objs.Children) != 0 || objs.Job.Annotations[s3layout.AnnotationS3Secret] != "team-s3" {
		t.Errorf("--s3-secret: children %d, annotations %v; want the Secret referenced, not created", len(objs.Children), objs.Job.Annotations)
	}
}
