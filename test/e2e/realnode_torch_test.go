//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Real torchrun: Debian's torch 1.13 in local/torch:1, launched with the seeds'
// multi-node command on the real node.

// torchrunCommand is the seeds' multi-node command with torchrun's output options: Debian's
// torch 1.13 under Python 3.11 crashes on its own defaults (--redirects 0 --tee 0) and on 3
// (both streams), because Python 3.11 no longer iterates over the composite flags NONE and ALL
// of torch's Std IntFlag; only 1 (stdout) and 2 (stderr) parse. 1 redirects each worker's stdout
// to a file and tees it back, prefixed "[default<local rank>]:", while stderr goes straight
// to the container's log, so all of a worker's output still reaches `kubectl tao logs`.
//
// The scripts run under it write each stdout line in one call (sys.stdout.write with its
// newline), never with print: under submit's PYTHONUNBUFFERED=1, print writes the text and
// its newline separately, and torchrun's tee, which reads the worker's file a line at a time as
// it grows, now and then reads the text alone and prints one line as two pieces.
const torchrunCommand = "torchrun --nnodes $NNODES --nproc_per_node 2 --node_rank $NODE_RANK " +
	"--master_addr $MASTER_ADDR --master_port $MASTER_PORT --redirects 1 --tee 1 "

// allReduceScript sums each process's rank+1 over a gloo process group (env:// from torchrun).
const allReduceScript = `import sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([rank + 1])
dist.all_reduce(t)
sys.stdout.write(f"allreduce rank {rank} world {world} sum {int(t.item())}\n")
sys.stdout.flush()
dist.destroy_process_group()
`

// loopScript all-reduces forever, once every 250 ms, and handles no signal itself.
const loopScript = `import sys, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
step = 0
while True:
    t = torch.tensor([1])
    dist.all_reduce(t)
    sys.stdout.write(f"loop rank {rank} step {step} world {int(t.item())}\n")
    sys.stdout.flush()
    step += 1
    time.sleep(0.25)
`

// torchImage returns the real node's torch image; without one it skips with the launcher's
// reason, or fails under CI=true, where .ci/run installs python3-torch.
func torchImage(t *testing.T, n realNodeEnv) string {
	t.Helper()
	return packageImage(t, "torch", n.TorchImage, n.TorchImageSkip,
		"TAO_TORCH_IMAGE is not set (the launcher builds local/torch:1 where python3-torch is installed)")
}

// packageImage returns image, a real-node image made of the host's Debian packages; where the
// host has none it skips with the launcher's reason (skip, else unset), or fails under
// CI=true, where .ci/run installs the packages.
func packageImage(t *testing.T, what, image, skip, unset string) string {
	t.Helper()
	if image != "" {
		return image
	}
	if skip == "" {
		skip = unset
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("no %s image on the real node under CI=true: %s", what, skip)
	}
	t.Skipf("no %s image on the real node: %s", what, skip)
	return ""
}

// scriptFile writes a Python script to ship with --file and returns the flag's value.
func scriptFile(t *testing.T, name, script string) string {
	t.Helper()
	local := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(local, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	return local + ":/opt/scripts/" + name
}

// TestRealNodeTorchrun runs real torchrun, 2 nodes of 2 processes, rendezvousing over the
// job's DNS: all 4 processes must print the same all-reduced sum (1+2+3+4) and the job
// Complete; then a looping job is canceled mid-run and must end through torchrun's own SIGTERM
// handling (it closes its workers with SIGTERM and exits), quickly, with no pod left.
func TestRealNodeTorchrun(t *testing.T) {
	n := realNode(t)
	image := torchImage(t, n)
	t.Parallel()
	ns := namespace(t)
	flags := func(file string) []string {
		return []string{"--image", image, "--nodes", "2", "--file", file}
	}

	t.Run("all-reduce", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		submitReal(t, n, ns, "allreduce", flags(scriptFile(t, "allreduce.py", allReduceScript)), torchrunCommand+"/opt/scripts/allreduce.py")
		waitComplete(t, ns, "allreduce")
		t.Logf("submit to Complete: %s", time.Since(start).Round(time.Millisecond))
		logs := jobLogs(t, ns, "allreduce")
		// "[default<local rank>]:allreduce rank <global rank> world 4 sum 10"
		rx := regexp.MustCompile(`^\[default(\d)\]:allreduce rank (\d+) world (\d+) sum (\d+)$`)
		seen := map[int]bool{}
		for node := range 2 {
			for _, l := range logs[node] {
				m := rx.FindStringSubmatch(l)
				if m == nil {
					continue
				}
				local, _ := strconv.Atoi(m[1])
				global, _ := strconv.Atoi(m[2])
				if global != node*2+local || m[3] != "4" || m[4] != "10" {
					t.Errorf("node %d: %q, want rank %d of world 4 with the sum 10", node, l, node*2+local)
				}
				seen[global] = true
			}
		}
		if len(seen) != 4 {
			t.Errorf("processes that printed the sum: %v, want all 4:\n%s", seen, tao(t, nil, "logs", "allreduce", "-n", ns).stdout)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		t.Parallel()
		submitReal(t, n, ns, "loop", flags(scriptFile(t, "loop.py", loopScript)), torchrunCommand+"/opt/scripts/loop.py")
		// Running means past the rendezvous: every process has all-reduced with all 4.
		follow := taoBackground(t, "logs", "-f", "loop", "-n", ns)
		follow.waitOutput(t, 3*time.Minute, "[rank 0] [default0]:loop rank 0 step 1 world 4", "[rank 1] [default1]:loop rank 3 step 1 world 4")
		streams := podLogStreams(t, ns, "loop")
		cancelQuickly(t, ns, "loop", 30, "torchrun")
		// torchrun's agent got SIGTERM, sent it on to both its workers and exited: its own lines.
		closing := regexp.MustCompile(`(?m)Sending process \d+ closing signal SIGTERM$`)
		for rank, s := range streams {
			out := s.wait(t)
			if got := len(closing.FindAllString(out, -1)); got != 2 || !strings.Contains(out, "SignalException: Process ") || !strings.Contains(out, "got signal: 15") {
				t.Errorf("node %d: want torchrun's SIGTERM handling (2 workers closed with SIGTERM, then its SignalException for signal 15) in the container's log, got %d closing lines:\n%s", rank, got, out)
			}
		}
		if r := follow.wait(t, 60*time.Second); r.code != 10 {
			t.Errorf("logs -f of the canceled job: want exit 10 (Canceled), got %s", r)
		}
	})
}
