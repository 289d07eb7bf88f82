//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// layoutsScript writes its checkpoints as a framework does, with torch.save and the framework's
// own file names and markers, in the order the framework writes them (no framework package is
// needed): LAYOUT=hf is HuggingFace's Trainer (checkpoint-N/: model.safetensors, optimizer.pt,
// scheduler.pt, rng_state[_R].pth, trainer_state.json last, after every rank's part),
// LAYOUT=deepspeed is DeepSpeed (global_stepN/ with rank 0's model states and a ZeRO optimizer
// shard per rank, then `latest` naming the tag, on rank 0 after a barrier), LAYOUT=ddp is a
// plain DDP loop that saves step-N.pt on rank 0 only. It saves every SAVE_EVERY steps and, on
// its first attempt, dies at step DIE_AT: DIE_HOW=after-save is a SIGKILL right after that step,
// mid-save a SIGKILL after the unit's first file, before-latest a SIGKILL once every rank wrote
// the tag but before `latest` names it. On resume it loads what TAO_RESUME_CHECKPOINT names as
// the framework would (HF's checkpoint directory, DeepSpeed's load directory and its `latest`)
// and prints the unit's files.
const layoutsScript = `import json, os, signal, struct, sys, time
import torch
import torch.distributed as dist

def say(line):
    sys.stdout.write(line + "\n")  # one write per line: torchrunCommand says why
    sys.stdout.flush()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
layout = os.environ["LAYOUT"]
steps, every = int(os.environ["STEPS"]), int(os.environ.get("SAVE_EVERY", "3"))
die_at, die_how = int(os.environ.get("DIE_AT", "-1")), os.environ.get("DIE_HOW", "")
ckpt, resume, attempt = os.environ["TAO_CHECKPOINT_DIR"], os.environ.get("TAO_RESUME_CHECKPOINT", ""), os.environ["TAO_ATTEMPT"]

def dies(step, how):
    return attempt == "1" and rank == 0 and step == die_at and die_how == how

def die(why):
    say(f"rank {rank} attempt {attempt} {why}")
    os.kill(os.getpid(), signal.SIGKILL)

def safetensors(path, step):
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + struct.pack("<f", float(step)))

def save_hf(step):
    d = f"{ckpt}/checkpoint-{step}"
    os.makedirs(d, exist_ok=True)
    if rank == 0:
        safetensors(f"{d}/model.safetensors", step)
        if dies(step, "mid-save"):
            die(f"dies while saving checkpoint-{step}")
        torch.save({"step": step}, f"{d}/optimizer.pt")
        torch.save({"step": step}, f"{d}/scheduler.pt")
    torch.save({"rank": rank}, f"{d}/rng_state_{rank}.pth" if world > 1 else f"{d}/rng_state.pth")
    dist.barrier()
    if rank == 0:
        with open(f"{d}/trainer_state.json", "w") as f:
            json.dump({"global_step": step}, f)

def load_hf(d):
    torch.load(f"{d}/optimizer.pt")
    return json.load(open(f"{d}/trainer_state.json"))["global_step"], sorted(os.listdir(d))

def save_ds(step):
    d = f"{ckpt}/global_step{step}"
    os.makedirs(d, exist_ok=True)
    if rank == 0:
        torch.save({"step": step}, f"{d}/mp_rank_00_model_states.pt")
    torch.save({"step": step, "rank": rank}, f"{d}/zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
    dist.barrier()
    if dies(step, "before-latest"):
        die(f"dies before latest names global_step{step}")
    if rank == 0:
        with open(f"{ckpt}/latest", "w") as f:
            f.write(f"global_step{step}")
    dist.barrier()

def load_ds(load_dir):
    tag = open(f"{load_dir}/latest").read().strip()
    d = f"{load_dir}/{tag}"
    step = torch.load(f"{d}/mp_rank_00_model_states.pt")["step"]
    for r in range(world):
        torch.load(f"{d}/zero_pp_rank_{r}_mp_rank_00_optim_states.pt")
    return step, [tag + "/" + f for f in sorted(os.listdir(d))]

def save_ddp(step):
    if rank == 0:
        p = f"{ckpt}/step-{step}.pt"
        torch.save({"step": step}, p)
        say(f"rank 0 attempt {attempt} wrote step-{step}.pt of {os.path.getsize(p)} bytes")

start = 0
if resume:
    if layout == "hf":
        step, files = load_hf(resume)
    elif layout == "deepspeed":
        step, files = load_ds(resume)
    else:
        step, files = torch.load(resume)["step"], [os.path.basename(resume)]
    start = step + 1
    say(f"rank {rank} attempt {attempt} resumed at step {start} from {os.path.relpath(resume, ckpt)} with {' '.join(files)}")
else:
    say(f"rank {rank} attempt {attempt} started at step 0")
save = {"hf": save_hf, "deepspeed": save_ds, "ddp": save_ddp}[layout]
for step in range(start, steps):
    t = torch.tensor([1])
    dist.all_reduce(t)
    say(f"rank {rank} attempt {attempt} step {step}")
    if step % every == every - 1:
        save(step)
    if dies(step, "after-save"):
        die(f"killed after step {step}")
    time.sleep(float(os.environ.get("STEP_DELAY", "0.2")))
dist.destroy_process_group()
say(f"rank {rank} attempt {attempt} done")
`

// TestRealNodeCheckpointLayouts proves whole checkpoint units with real processes on the real
// node (Debian's torch under torchrun, the stager in every rank, the S3 test server): an
// HF-shaped job killed mid-run resumes from its newest checkpoint-N/ with every file of it, and
// one killed while saving resumes from the unit before; a DeepSpeed-shaped 2-rank job restores
// the whole tag (both ranks' shards) on each rank and resumes from the tag `latest` names; a DDP
// job that saves on rank 0 only keeps no copy of rank 0's files under rank 1, and sends each
// file once; a new run with --resume-from starts at the old run's last unit.
func TestRealNodeCheckpointLayouts(t *testing.T) {
	rig := newTorchRig(t)
	n, ns, srv := rig.n, rig.ns, rig.srv
	file := scriptFile(t, "layouts.py", layoutsScript)
	const steps = 12
	flags := func(nodes int, extra ...string) []string {
		return rig.flags(file, nodes, append([]string{"--retries", "3"}, extra...)...)
	}
	command := func(nodes int) string { return torchrunEach(nodes, "/opt/scripts/layouts.py") }
	hfFiles := "model.safetensors optimizer.pt rng_state.pth scheduler.pt trainer_state.json"

	t.Run("huggingface", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct{ job, how, dieAt string }{
			// Killed at step 6, after checkpoint-5 was whole.
			{"hf-killed", "after-save", "6"},
			// Killed while saving checkpoint-8, after its model: checkpoint-5 is the last whole one.
			{"hf-cut", "mid-save", "8"},
		} {
			submitRealEnv(t, srv.Env("results"), n, ns, tc.job, flags(1, "--env", "LAYOUT=hf", "--env", "STEPS="+strconv.Itoa(steps),
				"--env", "DIE_HOW="+tc.how, "--env", "DIE_AT="+tc.dieAt), command(1))
		}
		for _, job := range []string{"hf-killed", "hf-cut"} {
			waitComplete(t, ns, job)
			second := jobAttemptLogs(t, ns, job, 2)[0]
			logLines(t, job+" attempt 2", second)
			want := "rank 0 attempt 2 resumed at step 6 from checkpoint-5 with " + hfFiles
			if !slices.Contains(second, want) {
				t.Errorf("%s: attempt 2 has no line %q", job, want)
			}
			if !slices.ContainsFunc(second, func(l string) bool {
				return strings.Contains(l, "resume checkpoint: /ckpt/checkpoint-5 (huggingface checkpoint-5, 5 files, ")
			}) {
				t.Errorf("%s: attempt 2's restore line does not name checkpoint-5 with its 5 files", job)
			}
			stepsOnce(t, job, second, 0, 2, 6, steps)
			// Retention kept the two newest whole units, every file of each; the unit cut short
			// is gone once newer ones are complete.
			units := resultsUnits(t, ns, job)
			if got := unitNames(units, true); !slices.Equal(got, []string{"checkpoint-11", "checkpoint-8"}) {
				t.Errorf("%s: complete units kept %q; want checkpoint-11, checkpoint-8", job, got)
			}
			for _, u := range units {
				if u.Complete && u.Files != 5 {
					t.Errorf("%s: %s kept with %d files, want 5", job, u.Path, u.Files)
				}
			}
		}
		contains(t, tao(t, nil, "logs", "hf-cut", "-n", ns, "--attempt", "1"), 0, "rank 0 attempt 1 dies while saving checkpoint-8")

		// A new run of fixed code starts at the old run's last unit.
		submitRealEnv(t, srv.Env("results"), n, ns, "hf-next", flags(1, "--env", "LAYOUT=hf", "--env", "STEPS=15", "--resume-from", "hf-killed"), command(1))
		waitComplete(t, ns, "hf-next")
		first := jobAttemptLogs(t, ns, "hf-next", 1)[0]
		logLines(t, "hf-next attempt 1", first)
		if want := "rank 0 attempt 1 resumed at step 12 from checkpoint-11 with " + hfFiles; !slices.Contains(first, want) {
			t.Errorf("hf-next: no line %q", want)
		}
		stepsOnce(t, "hf-next", first, 0, 1, 12, 15)
	})

	t.Run("deepspeed", func(t *testing.T) {
		t.Parallel()
		job := "ds-shards"
		submitRealEnv(t, srv.Env("results"), n, ns, job, flags(2, "--env", "LAYOUT=deepspeed", "--env", "STEPS="+strconv.Itoa(steps),
			"--env", "DIE_HOW=before-latest", "--env", "DIE_AT=8"), command(2))
		waitComplete(t, ns, job)
		var resumed []string
		for rank, lines := range lastAttempts(t, ns, job) {
			a := lines.attempt
			logLines(t, fmt.Sprintf("%s rank %d attempt %d", job, rank, a), lines.lines)
			want := fmt.Sprintf("rank %d attempt %d resumed at step 6 from . with global_step5/mp_rank_00_model_states.pt "+
				"global_step5/zero_pp_rank_0_mp_rank_00_optim_states.pt global_step5/zero_pp_rank_1_mp_rank_00_optim_states.pt", rank, a)
			if !slices.Contains(lines.lines, want) {
				t.Errorf("rank %d: no line %q: the whole tag `latest` names, both ranks' shards", rank, want)
			}
			stepsOnce(t, job, lines.lines, rank, a, 6, steps)
			resumed = append(resumed, strconv.Itoa(rank))
		}
		if len(resumed) != 2 {
			t.Errorf("ranks that resumed: %q, want both", resumed)
		}
	})

	t.Run("ddp-rank-0-saves", func(t *testing.T) {
		t.Parallel()
		job := "ddp-once"
		submitRealEnv(t, srv.Env("results"), n, ns, job, flags(2, "--env", "LAYOUT=ddp", "--env", "STEPS="+strconv.Itoa(steps),
			"--env", "DIE_HOW=after-save", "--env", "DIE_AT=7", "--checkpoint-keep", "100"), command(2))
		waitComplete(t, ns, job)
		last := lastAttempts(t, ns, job)
		for rank, l := range last {
			logLines(t, fmt.Sprintf("%s rank %d attempt %d", job, rank, l.attempt), l.lines)
			stepsOnce(t, job, l.lines, rank, l.attempt, 6, steps)
		}
		// What rank 0 wrote, over both attempts, and what S3 holds.
		wrote := map[string]int{}
		rx := regexp.MustCompile(`^rank 0 attempt \d+ wrote (step-\d+\.pt) of (\d+) bytes$`)
		for _, attempt := range []int{1, last[0].attempt} {
			for _, line := range jobAttemptLogs(t, ns, job, attempt)[0] {
				if m := rx.FindStringSubmatch(line); m != nil {
					wrote[m[1]], _ = strconv.Atoi(m[2])
				}
			}
		}
		uid := jobUID(t, ns, job)
		prefix, err := s3layout.ResultsPrefix(job, uid)
		if err != nil {
			t.Fatal(err)
		}
		if keys := srv.Keys(t, "results", s3layout.CheckpointFilesPrefix(prefix, 1)); len(keys) != 0 {
			t.Errorf("rank 1 keeps copies of rank 0's files: %q", keys)
		}
		files0 := s3layout.CheckpointFilesPrefix(prefix, 0)
		kept := map[string]int{}
		for _, k := range srv.Keys(t, "results", files0) {
			kept[strings.TrimPrefix(k, files0)] = len(srv.Get(t, "results", k))
		}
		if len(wrote) != 4 || fmt.Sprint(kept) != fmt.Sprint(wrote) {
			t.Errorf("rank 0 wrote %v; S3 holds %v: the bytes kept must equal the bytes written", wrote, kept)
		}
		// Rank 1 sent nothing in either attempt; rank 0's second attempt sent only what it wrote.
		for _, attempt := range []int{1, last[1].attempt} {
			if !slices.ContainsFunc(jobAttemptLogs(t, ns, job, attempt)[1], func(l string) bool {
				return strings.HasSuffix(l, "kubectl-tao: checkpoints: this attempt uploaded 0 files (0 B) that rank 1 wrote")
			}) {
				t.Errorf("rank 1 attempt %d: no line saying it uploaded nothing", attempt)
			}
		}
		if !slices.ContainsFunc(jobAttemptLogs(t, ns, job, last[0].attempt)[0], func(l string) bool {
			return strings.Contains(l, "kubectl-tao: checkpoints: this attempt uploaded 2 files (")
		}) {
			t.Errorf("rank 0's last attempt did not upload just the 2 files it wrote (step-8.pt, step-11.pt)")
		}
	})
}

// attemptLines are a rank's last attempt and its log.
type attemptLines struct {
	attempt int
	lines   []string
}

// lastAttempts is each rank's last attempt (of the first four) and its log.
func lastAttempts(t *testing.T, ns, job string) map[int]attemptLines {
	t.Helper()
	out := map[int]attemptLines{}
	for attempt := 1; attempt <= 4; attempt++ {
		for rank, lines := range jobAttemptLogs(t, ns, job, attempt) {
			if len(lines) > 0 {
				out[rank] = attemptLines{attempt, lines}
			}
		}
	}
	return out
}

// stepsOnce checks that an attempt of a rank ran every step from `from` to the end once and
// none before, and finished.
func stepsOnce(t *testing.T, job string, lines []string, rank, attempt, from, steps int) {
	t.Helper()
	for step := range steps {
		want := 0
		if step >= from {
			want = 1
		}
		line := fmt.Sprintf("rank %d attempt %d step %d", rank, attempt, step)
		if got := countLines(lines, line); got != want {
			t.Errorf("%s rank %d: %q %d times, want %d", job, rank, line, got, want)
		}
	}
	if !slices.Contains(lines, fmt.Sprintf("rank %d attempt %d done", rank, attempt)) {
		t.Errorf("%s rank %d: attempt %d did not finish", job, rank, attempt)
	}
}

// unitJSON is a checkpoint unit as `results -o json` prints it.
type unitJSON struct {
	Path     string `json:"path"`
	Layout   string `json:"layout"`
	Files    int    `json:"files"`
	Complete bool   `json:"complete"`
	Resume   bool   `json:"resume"`
}

// resultsUnits are the job's checkpoint units, from `results -o json`.
func resultsUnits(t *testing.T, ns, job string) []unitJSON {
	t.Helper()
	r := tao(t, nil, "results", job, "-n", ns, "-o", "json")
	if r.code != 0 {
		t.Fatalf("results: %s", r)
	}
	var l struct {
		Checkpoints []unitJSON `json:"checkpoints"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil {
		t.Fatalf("results -o json: %v\n%s", err, r.stdout)
	}
	return l.Checkpoints
}

// unitNames are the paths of the units, only the complete ones when complete is set.
func unitNames(us []unitJSON, complete bool) []string {
	var out []string
	for _, u := range us {
		if !complete || u.Complete {
			out = append(out, u.Path)
		}
	}
	return out
}

// jobUID is the Job's UID.
func jobUID(t *testing.T, ns, job string) string {
	t.Helper()
	j, err := client.BatchV1().Jobs(ns).Get(context.Background(), job, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(j.UID)
}
