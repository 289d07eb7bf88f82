//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubectl-tao/kubectl-tao/test/localcluster"
)

// topJob is the part of `top JOB -o json` the tests read.
type topJob struct {
	Job         string `json:"job"`
	Status      string `json:"status"`
	GPUs        int    `json:"gpus"`
	GPUResource string `json:"gpuResource"`
	Progress    *struct {
		Epoch      *int               `json:"epoch"`
		MaxEpoch   *int               `json:"maxEpoch"`
		ETASeconds *float64           `json:"etaSeconds"`
		Status     string             `json:"status"`
		KPI        map[string]float64 `json:"kpi"`
	} `json:"progress"`
	MetricsSource string `json:"metricsSource"`
	Ranks         []struct {
		Rank           int        `json:"rank"`
		Pod            string     `json:"pod"`
		Node           string     `json:"node"`
		Attempt        int        `json:"attempt"`
		Phase          string     `json:"phase"`
		LastOutputTime *time.Time `json:"lastOutputTime"`
		MetricsSource  string     `json:"metricsSource"`
		GPUs           []struct {
			UUID             string   `json:"uuid"`
			MIGProfile       string   `json:"migProfile"`
			MIGInstance      string   `json:"migInstance"`
			Utilization      *float64 `json:"utilization"`
			MemoryUsedBytes  *int64   `json:"memoryUsedBytes"`
			MemoryTotalBytes *int64   `json:"memoryTotalBytes"`
		} `json:"gpus"`
	} `json:"ranks"`
	Findings []topFinding `json:"findings"`
}

type topFinding struct {
	Name    string `json:"node_event_name"`
	Rank    int    `json:"rank"`
	Message string `json:"message"`
}

// finding reports whether the reading has finding name about rank.
func (j topJob) finding(name string, rank int) bool {
	return slices.ContainsFunc(j.Findings, func(f topFinding) bool { return f.Name == name && f.Rank == rank })
}

// util is rank's first GPU's utilisation, -1 without one.
func (j topJob) util(rank int) float64 {
	for _, r := range j.Ranks {
		if r.Rank == rank && len(r.GPUs) > 0 && r.GPUs[0].Utilization != nil {
			return *r.GPUs[0].Utilization
		}
	}
	return -1
}

// topUntil runs `top JOB -o json` (with args) until done accepts the reading, and returns it
// with the run that gave it.
func topUntil(t *testing.T, ns, job string, args []string, done func(topJob) bool) (topJob, result) {
	t.Helper()
	var j topJob
	var r result
	err := pollErr(90*time.Second, func(context.Context) (bool, error) {
		r = tao(t, nil, append([]string{"top", job, "-n", ns, "-o", "json"}, args...)...)
		if r.code != 0 {
			return false, fmt.Errorf("top: %s", r)
		}
		j = topJob{}
		if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
			return false, fmt.Errorf("top -o json: %v\n%s", err, r)
		}
		return done(j), nil
	})
	if err != nil {
		t.Fatalf("top %s: %v\nlast reading: %s", job, err, r)
	}
	return j, r
}

// warnings are the lines of stderr.
func warnings(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// tickScript prints a line a second in every rank; a rank listed in SILENT_RANK stops after 3
// lines but goes on running. The trap ends it at once when the job is cancelled.
const tickScript = `trap 'exit 0' TERM
i=0
while :; do
  if [ "$JOB_COMPLETION_INDEX" != "${SILENT_RANK:-none}" ] || [ $i -lt 3 ]; then echo "step $i"; fi
  i=$((i+1))
  sleep 1
done`

// statusLine prints one TAO status.json line (as TAO's PyTorch backend writes it) for epoch
// $1 with loss $2, dated now in UTC as a container's local time is.
const statusLine = `status_line() {
  printf '{"epoch": %s, "max_epoch": 80, "time_per_epoch": "0:07:41.250000", "eta": "9:58:42.750000", "date": "%s", "time": "%s", "status": "RUNNING", "message": "Training loop in progress", "kpi": {"loss": %s}}\n' \
    "$1" "$(date -u +%-m/%-d/%Y)" "$(date -u +%-H:%-M:%-S)" "$2"
}
`

// smiScript sets what the nvidia-smi stand-in in the rank shows, then prints a line a second.
func smiScript(util, memUsedMiB int) string {
	return fmt.Sprintf(`trap 'exit 0' TERM
printf 'util=%d\nmem_used_mib=%d\n' > /tmp/nvidia-smi-stand-in
while :; do echo tick; sleep 1; done`, util, memUsedMiB)
}

// TestRealNodeTop runs `kubectl tao top` (and diagnose's share of it) against real pods on the
// real node: GPU numbers from its dcgm-exporter stand-in through the pod proxy, from the
// nvidia-smi stand-in exec'd in a rank when the exporter is gone or may not be read, and from
// neither; TAO's status.json read in rank 0; a rank gone silent with its GPU idle.
func TestRealNodeTop(t *testing.T) {
	n := realNode(t)
	stateDir := os.Getenv("LOCALCLUSTER_STATE_DIR")
	if stateDir == "" {
		t.Fatal("LOCALCLUSTER_STATE_DIR must be set (make e2e sets it): the test sets what the node's GPUs show")
	}
	t.Parallel()
	setGPU := func(t *testing.T, ns, pod string, m localcluster.GPUMetrics) {
		t.Helper()
		if err := localcluster.SetGPUMetrics(stateDir, ns, pod, m); err != nil {
			t.Fatal(err)
		}
	}
	gpuFlags := func(nodes string, extra ...string) []string {
		return append([]string{"--nodes", nodes, "--gpus", "1", "--shm-size", "0"}, extra...)
	}

	// The exporter runs in these; they run side by side.
	t.Run("exporter", func(t *testing.T) {
		lockExporter(t, stateDir, false)
		t.Run("silent idle rank", func(t *testing.T) {
			t.Parallel()
			ns, job := namespace(t), "silent"
			submitReal(t, n, ns, job, gpuFlags("2", "--env", "SILENT_RANK=1"), tickScript)
			var pods map[int]string
			poll(t, 90*time.Second, "both ranks' pods", func(context.Context) (bool, error) {
				pods = rankPods(t, ns, job)
				return len(pods) == 2, nil
			})
			setGPU(t, ns, pods[0], localcluster.GPUMetrics{Util: 97, MemUsedMiB: 70000})
			setGPU(t, ns, pods[1], localcluster.GPUMetrics{Util: 0})

			silent := []string{"--silent-after", "15s"}
			j, r := topUntil(t, ns, job, silent, func(j topJob) bool {
				return j.finding("SilentRank", 1) && j.finding("IdleGPUs", 1) && j.util(0) == 97
			})
			if j.MetricsSource != "dcgm-exporter" || j.Status != "Running" || j.GPUs != 2 || len(j.Ranks) != 2 {
				t.Fatalf("want a Running job of 2 GPUs read from dcgm-exporter, got %s", r)
			}
			if j.finding("SilentRank", 0) || j.finding("IdleGPUs", 0) || slices.ContainsFunc(j.Findings, func(f topFinding) bool { return f.Name == "LikelyHang" }) {
				t.Errorf("rank 0 prints and is busy: no finding about it, got %s", r)
			}
			ids := localcluster.GPUDeviceIDs(stateDir, 8)
			for _, rk := range j.Ranks {
				if rk.MetricsSource != "dcgm-exporter" || len(rk.GPUs) != 1 || rk.Pod != pods[rk.Rank] || rk.Node != n.Name || rk.Attempt != 1 {
					t.Fatalf("rank %d: want its pod %s on %s, attempt 1, one GPU from dcgm-exporter; got %s", rk.Rank, pods[rk.Rank], n.Name, r)
				}
				if !slices.Contains(ids, rk.GPUs[0].UUID) {
					t.Errorf("rank %d's GPU %s is none of the node's devices %v", rk.Rank, rk.GPUs[0].UUID, ids)
				}
				if rk.LastOutputTime == nil {
					t.Errorf("rank %d printed, but has no lastOutputTime: %s", rk.Rank, r)
				}
			}
			if j.Ranks[0].GPUs[0].UUID == j.Ranks[1].GPUs[0].UUID {
				t.Errorf("both ranks hold GPU %s", j.Ranks[0].GPUs[0].UUID)
			}
			if g := j.Ranks[0].GPUs[0]; g.MemoryUsedBytes == nil || *g.MemoryUsedBytes != 70000<<20 || g.MemoryTotalBytes == nil || *g.MemoryTotalBytes != 81559<<20 {
				t.Errorf("rank 0's GPU memory: want 70000 of 81559 MiB, got %s", r)
			}
			if r.stderr != "" {
				t.Errorf("top with the exporter at hand warned: %s", r)
			}

			// The human view: the job's line, a header and a row per rank, the findings.
			h := tao(t, nil, "top", job, "-n", ns, "--silent-after", "15s")
			contains(t, h, 0, "job.batch/silent  Running  GPU metrics: dcgm-exporter\n", "Findings:\n",
				"  SilentRank: rank 1 printed last ", ", and its GPUs read 5% or less", "  IdleGPUs: rank 1's GPUs read 5% or less")
			lines := strings.Split(h.stdout, "\n")
			if len(lines) < 4 || strings.Join(strings.Fields(lines[1]), " ") != "RANK POD NODE GPU GPU MEM LAST OUTPUT ATTEMPT" {
				t.Fatalf("want the ranks' header on the second line, got %s", h)
			}
			for rank, want := range map[int][]string{0: {"97%", "68.4/79.6Gi", "1"}, 1: {"0%", "0.0/79.6Gi", "1"}} {
				row := strings.Fields(lines[2+rank])
				if len(row) < 7 || row[0] != fmt.Sprint(rank) || row[1] != pods[rank] || row[2] != n.Name {
					t.Fatalf("rank %d's row: %q, want rank, pod %s, node %s first; output %s", rank, lines[2+rank], pods[rank], n.Name, h)
				}
				for _, w := range want {
					if !slices.Contains(row, w) {
						t.Errorf("rank %d's row %q lacks %q", rank, lines[2+rank], w)
					}
				}
				if !strings.Contains(lines[2+rank], " ago ") {
					t.Errorf("rank %d's row %q has no last output", rank, lines[2+rank])
				}
			}
			if h.stderr != "" {
				t.Errorf("top warned: %s", h)
			}

			// diagnose says the same of the running job: the silent rank is what happened.
			d := tao(t, nil, "diagnose", job, "-n", ns, "--silent-after", "15s")
			contains(t, d, 0, "SilentRank", "rank 1 printed last", "IdleGPUs")
			var a analysis
			dj := tao(t, nil, "diagnose", job, "-n", ns, "--silent-after", "15s", "-o", "json")
			if dj.code != 0 {
				t.Fatalf("diagnose -o json: %s", dj)
			}
			if err := json.Unmarshal([]byte(dj.stdout), &a); err != nil {
				t.Fatalf("diagnose -o json: %v\n%s", err, dj)
			}
			if a.Status != "Running" || a.ErrClass == nil || *a.ErrClass != "ERR_PROGRAM" || len(a.Events) == 0 ||
				a.Events[0].Name != "SilentRank" || a.Events[0].Rank != 1 || a.Events[0].Pod != pods[1] {
				t.Fatalf("diagnose -o json of a running job with a silent rank: want SilentRank of rank 1 first, ERR_PROGRAM; got %s", dj)
			}
		})

		t.Run("progress", func(t *testing.T) {
			t.Parallel()
			ns := namespace(t)
			// No --output-path and no --status-file: top finds the newest status.json below /results.
			submitReal(t, n, ns, "tao", []string{"--shm-size", "0"}, statusLine+`trap 'exit 0' TERM
mkdir -p /results/train
status_line 2 0.61 >> /results/train/status.json
status_line 3 0.4321 >> /results/train/status.json
echo training
while :; do sleep 1; done`)
			// --status-file names the file; a status.json where top would look otherwise is not it.
			submitReal(t, n, ns, "custom", []string{"--shm-size", "0", "--status-file", "/custom/status.json"}, statusLine+`trap 'exit 0' TERM
mkdir -p /custom /results/train
status_line 9 9.9 >> /results/train/status.json
status_line 7 0.25 >> /custom/status.json
echo training
while :; do sleep 1; done`)
			for _, c := range []struct {
				job        string
				epoch      int
				loss       float64
				lossString string
			}{{"tao", 3, 0.4321, "loss=0.4321"}, {"custom", 7, 0.25, "loss=0.25"}} {
				j, r := topUntil(t, ns, c.job, nil, func(j topJob) bool { return j.Progress != nil })
				p := j.Progress
				if p.Epoch == nil || *p.Epoch != c.epoch || p.MaxEpoch == nil || *p.MaxEpoch != 80 || p.ETASeconds == nil ||
					*p.ETASeconds != 35922.75 || p.KPI["loss"] != c.loss || p.Status != "RUNNING" {
					t.Fatalf("%s: want epoch %d of 80, ETA 35922.75 s, loss %v, RUNNING; got %s", c.job, c.epoch, c.loss, r)
				}
				if len(j.Findings) != 0 {
					t.Errorf("%s: a fresh epoch is no finding, got %s", c.job, r)
				}
				h := tao(t, nil, "top", c.job, "-n", ns)
				contains(t, h, 0, fmt.Sprintf("job.batch/%s  Running  epoch %d/80  ETA 9h58m  %s  GPU metrics: none\n", c.job, c.epoch, c.lossString))
				if h.stderr != "" {
					t.Errorf("%s: a job without GPUs needs no GPU numbers, but top warned: %s", c.job, h)
				}
			}
		})

		t.Run("rbac without pods/proxy", func(t *testing.T) {
			t.Parallel()
			ns, job := namespace(t), "noproxy"
			submitReal(t, n, ns, job, gpuFlags("1"), smiScript(33, 2048))
			// Exactly what `kubectl tao rbac` grants: exec and logs in the namespace, pods listed
			// everywhere, no pods/proxy.
			user := leastPrivilegeUser(t, ns, "top-")
			j, r := topUntil(t, ns, job, []string{"--as", user}, func(j topJob) bool { return j.util(0) == 33 })
			if j.MetricsSource != "nvidia-smi" || j.Ranks[0].MetricsSource != "nvidia-smi" {
				t.Fatalf("without pods/proxy: want GPU numbers from nvidia-smi, got %s", r)
			}
			w := warnings(r.stderr)
			if len(w) != 1 || !strings.HasPrefix(w[0], "Warning: ") || !strings.Contains(w[0], "pods/proxy") || !strings.Contains(w[0], "nvidia-smi") {
				t.Fatalf("want one warning naming pods/proxy and nvidia-smi, got %s", r)
			}
			h := tao(t, nil, "top", job, "-n", ns, "--as", user)
			contains(t, h, 0, "GPU metrics: nvidia-smi", " 33%")
			if len(warnings(h.stderr)) != 1 {
				t.Errorf("want the warning once, got %s", h)
			}
		})
	})

	// Without the exporter; these run side by side, after the ones above.
	t.Run("no exporter", func(t *testing.T) {
		lockExporter(t, stateDir, true)
		if _, err := launcher(t, "gpu-exporter-down"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := launcher(t, "gpu-exporter-up"); err != nil {
				t.Errorf("the GPU exporter did not come back; later tests read a node without one: %v", err)
			}
		})

		t.Run("no nvidia-smi", func(t *testing.T) {
			t.Parallel()
			ns, job := namespace(t), "nosmi"
			// The image has /bin/sh alone: no sleep, so the rank blocks reading a pty no one writes.
			submitReal(t, n, ns, job, gpuFlags("1", "--image", n.ShOnlyImage),
				"/bin/sh", "-c", `trap 'exit 0' TERM; echo started; read x < /dev/ptmx & wait`)
			j, r := topUntil(t, ns, job, nil, func(j topJob) bool {
				return j.Status == "Running" && len(j.Ranks) == 1 && j.Ranks[0].LastOutputTime != nil
			})
			if j.MetricsSource != "none" || len(j.Ranks[0].GPUs) != 0 {
				t.Fatalf("want no GPU numbers, got %s", r)
			}
			h := tao(t, nil, "top", job, "-n", ns)
			if h.code != 0 {
				t.Fatalf("top: %s", h)
			}
			lines := strings.Split(h.stdout, "\n")
			if len(lines) < 3 || !strings.Contains(lines[0], "GPU metrics: none") {
				t.Fatalf("want the job's line saying GPU metrics: none, got %s", h)
			}
			row := strings.Fields(lines[2])
			if len(row) < 7 || row[3] != "-" || row[4] != "-" {
				t.Errorf("want - in the GPU columns, got %q in %s", lines[2], h)
			}
			w := warnings(h.stderr)
			if len(w) != 1 || !strings.HasPrefix(w[0], "Warning: ") || !strings.Contains(w[0], "dcgm-exporter") || !strings.Contains(w[0], "nvidia-smi") {
				t.Fatalf("want one warning saying what would give GPU numbers (dcgm-exporter, nvidia-smi), got %s", h)
			}
		})

		t.Run("nvidia-smi", func(t *testing.T) {
			t.Parallel()
			ns, job := namespace(t), "smi"
			submitReal(t, n, ns, job, gpuFlags("1"), smiScript(55, 4096))
			j, r := topUntil(t, ns, job, nil, func(j topJob) bool { return j.util(0) == 55 })
			g := j.Ranks[0].GPUs
			if j.MetricsSource != "nvidia-smi" || j.Ranks[0].MetricsSource != "nvidia-smi" || len(g) != 1 ||
				g[0].MemoryUsedBytes == nil || *g[0].MemoryUsedBytes != 4096<<20 || !slices.Contains(localcluster.GPUDeviceIDs(stateDir, 8), g[0].UUID) {
				t.Fatalf("want one GPU of the node read by nvidia-smi, 55%% and 4096 MiB used, got %s", r)
			}
			if r.stderr != "" {
				t.Errorf("nvidia-smi gave the numbers: no warning wanted, got %s", r)
			}
			contains(t, tao(t, nil, "top", job, "-n", ns), 0, "GPU metrics: nvidia-smi", " 55%", "4.0/79.6Gi")
		})
	})
}

// lockExporter keeps the node's GPU exporter as the test needs it until the test and its
// subtests end: up (shared), or stopped by the test (exclusive), against test/localcluster's
// own exporter test, which runs at the same time.
func lockExporter(t *testing.T, stateDir string, exclusive bool) {
	t.Helper()
	unlock, err := localcluster.LockGPUExporter(stateDir, exclusive)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock)
}
