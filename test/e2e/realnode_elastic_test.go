//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// elasticScript trains over gloo at whatever world size torchrun's elastic agents agree on. At
// every (re)start of the workers the ranks agree on the newest step any of them has saved (every
// rank saves every 5 steps, into its pod's checkpoint directory, so a rank that leaves takes no
// checkpoint away) and go on after it. Global rank 0 says each start ("seg", with its time: the
// ranks' logs are read back per pod, not in time order) and each step, tagged with that start.
// The job ends once a file /tmp/finish exists in any pod (the test says when).
const elasticScript = `import glob, os, sys, time
import torch
import torch.distributed as dist

def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ckpt = os.environ["TAO_CHECKPOINT_DIR"]
newest = -1
for p in glob.glob(ckpt + "/step-*.pt"):
    try:
        newest = max(newest, torch.load(p)["step"])
    except Exception:
        pass
t = torch.tensor([newest])
dist.all_reduce(t, op=dist.ReduceOp.MAX)
start = int(t.item()) + 1
seg = "%.3f" % time.time()
if rank == 0:
    say(f"seg {seg} world {world} start {start}")
step = start
while True:
    x = torch.tensor([1, int(os.path.exists("/tmp/finish"))])
    dist.all_reduce(x, op=dist.ReduceOp.SUM)
    if rank == 0:
        say(f"step {step} world {int(x[0].item())} seg {seg}")
    if step % 5 == 4:
        torch.save({"step": step}, f"{ckpt}/step-{step}.pt")
    if x[1].item() > 0:
        break
    step += 1
    time.sleep(0.4)
dist.destroy_process_group()
if rank == 0:
    say(f"finished at step {step}")
`

// elasticSegment is one start of the workers at one world size, with the steps it ran.
type elasticSegment struct {
	at           float64
	tag          string
	world, start int
	steps        []int
}

// elasticSegments reads global rank 0's lines of every pod of the job (current and past),
// ordered in time.
func elasticSegments(t *testing.T, ns, job string) ([]elasticSegment, string) {
	t.Helper()
	r := tao(t, nil, "logs", job, "-n", ns)
	seg := regexp.MustCompile(`seg (\S+) world (\d+) start (\d+)$`)
	step := regexp.MustCompile(`step (\d+) world (\d+) seg (\S+)$`)
	bySeg := map[string]*elasticSegment{}
	var steps [][]string
	for _, l := range strings.Split(r.stdout, "\n") {
		if m := seg.FindStringSubmatch(l); m != nil {
			at, _ := strconv.ParseFloat(m[1], 64)
			w, _ := strconv.Atoi(m[2])
			s, _ := strconv.Atoi(m[3])
			bySeg[m[1]] = &elasticSegment{at: at, tag: m[1], world: w, start: s}
		} else if m := step.FindStringSubmatch(l); m != nil {
			steps = append(steps, m)
		}
	}
	for _, m := range steps {
		if s := bySeg[m[3]]; s != nil {
			n, _ := strconv.Atoi(m[1])
			w, _ := strconv.Atoi(m[2])
			if w != s.world {
				t.Errorf("step %d of the start at %s summed %d ranks, but the start had world size %d", n, s.tag, w, s.world)
			}
			s.steps = append(s.steps, n)
		}
	}
	out := make([]elasticSegment, 0, len(bySeg))
	for _, s := range bySeg {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out, r.stdout
}

// waitSegment waits for a start of the workers at world size world after the first after of
// them that has run six steps, and returns how many starts there are then.
func waitSegment(t *testing.T, ns, job string, after, world int, why string) int {
	t.Helper()
	var segs []elasticSegment
	var log string
	deadline := time.Now().Add(4 * time.Minute)
	for time.Now().Before(deadline) {
		segs, log = elasticSegments(t, ns, job)
		for i := after; i < len(segs); i++ {
			// Six steps: one of them was saved (every 5th), so the next start has a checkpoint
			// to go on from.
			if segs[i].world == world && len(segs[i].steps) >= 6 {
				t.Logf("%s: the workers started again at world size %d, from step %d", why, world, segs[i].start)
				return i + 1
			}
		}
		time.Sleep(2 * time.Second)
	}
	t.Fatalf("%s: no start at world size %d after the first %d starts %+v:\n%s\nstatus:\n%s", why, world, after, segs, log, tao(t, nil, "status", job, "-n", ns))
	return 0
}

// TestRealNodeElastic proves --nodes MIN:MAX with real processes on the real node: Debian's
// torch under torchrun's elastic agents, c10d rendezvous on index 0, gloo. A 1:3 job starts at
// the size that fits; `scale` shrinks it to 2 and grows it to 3 again; a rank's pod deleted with
// no room for its replacement (a pod quota in the namespace) leaves 2 ranks training, and once
// there is room the job grows back to 3; it completes, every start of the workers after the
// first going on right after the newest checkpoint, and every step after each start run once.
func TestRealNodeElastic(t *testing.T) {
	rig := newTorchRig(t)
	n, ns := rig.n, rig.ns
	const job = "elastic"
	file := scriptFile(t, "elastic.py", elasticScript)
	// 6Gi a rank, /dev/shm within it: three ranks fit the node's memory (24Gi on the machines
	// the suite runs on), and how many fit now depends on what else runs there.
	flags := []string{"--image", rig.image, "--stager-image", n.StagerImage, "--gpus", "1", "--nodes", "1:3", "--file", file,
		"--checkpoint-dir", "/ckpt", "--memory", "6Gi", "--shm-size", "1Gi"}
	r := tao(t, rig.srv.Env("results"), n.submitArgs(ns, job, flags, "torchrun", "--redirects", "1", "--tee", "1", "/opt/scripts/elastic.py")...)
	if r.code != 0 {
		t.Fatalf("submit: %s", r)
	}
	m := regexp.MustCompile(`elastic job elastic: starting with (\d) ranks of 1:3: `).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("submit did not say the size it chose and why: %s", r)
	}
	size, _ := strconv.Atoi(m[1])
	t.Logf("started with %d ranks (%s)", size, strings.TrimSpace(r.stderr))
	follow := taoBackground(t, "logs", "-f", job, "-n", ns)
	segs := waitSegment(t, ns, job, 0, size, "the first start")

	scale := func(n int) {
		t.Helper()
		r := tao(t, nil, "scale", job, "-n", ns, "--nodes", strconv.Itoa(n), "--wait", "--timeout", "4m")
		contains(t, r, 0, "job.batch/elastic scaled", fmt.Sprintf("job.batch/elastic trains at %d ranks (torchrun's rendezvous in rank 0: group_world_size=%d)", n, n))
		t.Logf("scale --nodes %d --wait: %s", n, r)
	}
	if size != 3 {
		scale(3)
		segs = waitSegment(t, ns, job, segs, 3, "scale --nodes 3")
	}
	st := tao(t, nil, "status", job, "-n", ns)
	contains(t, st, 0, "3/3 ranks running (elastic 1:3)")
	t.Logf("status: %s", st)
	contains(t, tao(t, nil, "list", "-n", ns), 0, "3/3 (1:3)")

	scale(2)
	segs = waitSegment(t, ns, job, segs, 2, "scale --nodes 2")
	scale(3)
	segs = waitSegment(t, ns, job, segs, 3, "scale --nodes 3 again")

	// A lost rank with no room for its replacement: the namespace may hold 2 pods from now on.
	ctx := context.Background()
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "two-pods", Namespace: ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("2")}}}
	if _, err := client.CoreV1().ResourceQuotas(ns).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, time.Minute, "the quota counted", func(ctx context.Context) (bool, error) {
		q, err := client.CoreV1().ResourceQuotas(ns).Get(ctx, quota.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		used := q.Status.Used[corev1.ResourcePods]
		return used.Value() == 3, nil
	})
	lost := rankPods(t, ns, job)[2]
	if err := client.CoreV1().Pods(ns).Delete(ctx, lost, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting rank 2's pod %s: %v", lost, err)
	}
	segs = waitSegment(t, ns, job, segs, 2, "rank 2's pod deleted with no room for another")
	if running := podsRunning(t, ns, job); running != 2 {
		t.Errorf("%d pods running while the quota holds 2", running)
	}
	if err := client.CoreV1().ResourceQuotas(ns).Delete(ctx, quota.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	segs = waitSegment(t, ns, job, segs, 3, "room again")

	if r := tao(t, nil, "exec", job, "-n", ns, "--rank", "0", "--", "python3", "-c", "open('/tmp/finish', 'w').close()"); r.code != 0 {
		t.Fatalf("telling the job to finish: %s", r)
	}
	waitComplete(t, ns, job)
	t.Logf("logs -f stderr:\n%s", follow.errOut.String())
	// torchrun's own rendezvous lines in rank 0's log, what scale --wait reads.
	var rdzv []string
	keep := 0
	for _, l := range strings.Split(tao(t, nil, "logs", job, "-n", ns, "--rank", "0").stdout, "\n") {
		if strings.Contains(l, "Rendezvous complete for workers") {
			keep = 11
		}
		if keep > 0 {
			rdzv, keep = append(rdzv, l), keep-1
		}
	}
	t.Logf("rank 0's rendezvous lines:\n%s", strings.Join(rdzv, "\n"))
	follow.waitStderr(t, time.Minute, "job.batch/elastic: from 3 to 2 ranks (elastic 1:3)\n", "job.batch/elastic: from 2 to 3 ranks (elastic 1:3)\n",
		"job.batch/elastic: rank 2 lost its pod "+lost+" (deleted): the other ranks go on without it until it is placed again\n")
	// The rank a shrink removed was not lost: one such line, for the deleted pod.
	if n := strings.Count(follow.errOut.String(), "lost its pod"); n != 1 {
		t.Errorf("logs -f said %d lost pods, want 1:\n%s", n, follow.errOut.String())
	}
	checkElasticSegments(t, ns, job, segs)
}

// checkElasticSegments checks the starts of the workers: the first at step 0, every later one
// right after a step that was saved (every 5th) and not from 0, the steps of each run once and
// in order, and the last one finished.
func checkElasticSegments(t *testing.T, ns, job string, atLeast int) {
	t.Helper()
	segs, log := elasticSegments(t, ns, job)
	if len(segs) < atLeast {
		t.Fatalf("%d starts of the workers, want at least %d:\n%s", len(segs), atLeast, log)
	}
	var worlds []int
	for i, s := range segs {
		worlds = append(worlds, s.world)
		switch {
		case i == 0 && s.start != 0:
			t.Errorf("the first start was at step %d, want 0", s.start)
		case i > 0 && (s.start == 0 || s.start%5 != 0):
			t.Errorf("start %d (world size %d) went on at step %d: want right after a saved step (every 5th), never from 0", i, s.world, s.start)
		case i > 0 && s.start > segs[i-1].start+len(segs[i-1].steps):
			t.Errorf("start %d went on at step %d, past the %d steps the one before ran from %d", i, s.start, len(segs[i-1].steps), segs[i-1].start)
		}
		for k, step := range s.steps {
			if step != s.start+k {
				t.Errorf("start %d (world size %d): steps %v, want each from %d once, in order", i, s.world, s.steps, s.start)
				break
			}
		}
	}
	t.Logf("world sizes of the starts of the workers: %v", worlds)
	if !strings.Contains(log, "finished at step ") {
		t.Errorf("the job did not finish its loop:\n%s", log)
	}
	if !slices.Contains(worlds, 2) || worlds[len(worlds)-1] != 3 {
		t.Errorf("world sizes %v: want 2 (scaled down, a lost rank) and 3 at the end", worlds)
	}
}

// podsRunning counts the job's pods in phase Running, not being deleted.
func podsRunning(t *testing.T, ns, job string) int {
	t.Helper()
	n := 0
	for _, p := range jobPods(t, ns, job) {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}
