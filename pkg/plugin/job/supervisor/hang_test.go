package supervisor

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

func TestParseUtilisation(t *testing.T) {
	for _, tc := range []struct {
		out     string
		want    int
		wantErr bool
	}{
		{"0\n", 0, false},
		{"3\n87\n", 87, false},
		{" 12 %\n", 12, false},
		// A MIG slice cannot say; the other GPU can.
		{"[N/A]\n40\n", 40, false},
		{"[N/A]\n", 0, true},
		{"", 0, true},
		{"No devices were found\n", 0, true},
	} {
		got, err := parseUtilisation(tc.out)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%q: %d, %v; want %d, error %v", tc.out, got, err, tc.want, tc.wantErr)
		}
	}
}

// The innermost frame of each thread, the main thread's first, from a real faulthandler dump
// and a py-spy one (testdata/README.md says where each comes from).
func TestInnermostFrames(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	got := FaulthandlerInnermost(read("faulthandler.txt"))
	want := []string{"all_reduce (/workspace/train.py:9)", "wait (/usr/lib/python3.11/threading.py:324)", "wait (/usr/lib/python3.11/threading.py:320)"}
	if !slices.Equal(got, want) {
		t.Errorf("faulthandler: %q, want %q", got, want)
	}
	got = PySpyInnermost(read("py-spy-dump.txt"))
	want = []string{"all_reduce (torch/distributed/distributed_c10d.py:2050)", "wait (threading.py:324)", "<lambda> (built-in)"}
	if !slices.Equal(got, want) {
		t.Errorf("py-spy: %q, want %q", got, want)
	}
	if s := summary(append(want, want[0]), 2); s != "all_reduce (torch/distributed/distributed_c10d.py:2050); wait (threading.py:324); and 1 more" {
		t.Errorf("summary %q", s)
	}
	// py-spy reads a process without stopping it.
	if a := PySpyArgs(2171); strings.Join(a, " ") != "dump --pid 2171 --nonblocking" {
		t.Errorf("py-spy %q", a)
	}
}

// What the supervisor records is what stage stacks reads: the command's group in place of any
// before, then each agent command's after it.
func TestRecordedGroups(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	if _, err := RecordedGroups(); err == nil || !strings.Contains(err.Error(), "no command runs under the supervisor") {
		t.Errorf("nothing recorded: %v", err)
	}
	if err := os.MkdirAll(StacksDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	addGroup(7)
	recordGroup(38)
	addGroup(52)
	addGroup(60)
	if got, err := RecordedGroups(); err != nil || !slices.Equal(got, []int{38, 52, 60}) {
		t.Errorf("RecordedGroups = %v, %v; want [38 52 60]", got, err)
	}
	if err := os.WriteFile(filepath.Join(StacksDir(), groupFile), []byte("38\nx\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := RecordedGroups(); err == nil || !strings.Contains(err.Error(), `"x" is not a process group`) {
		t.Errorf("a broken file: %v", err)
	}
}

func TestStatGroup(t *testing.T) {
	for stat, want := range map[string]int{
		"2171 (python3) S 2170 2170 2170 0 -1 4194560": 2170,
		"42 (a (weird) name) R 1 77 77 0":              77,
		"broken":                                       -1,
	} {
		if got := statGroup(stat); got != want {
			t.Errorf("%q: %d, want %d", stat, got, want)
		}
	}
}

// The command's processes are its group and every descendant, in a group of its own or not:
// OpenMPI's mpirun and daemons put each process they start in its own group.
func TestGroupProcesses(t *testing.T) {
	proc := t.TempDir()
	for pid, p := range map[int]struct {
		stat, cmdline string
	}{
		1:  {"1 (pause) S 0 1 1", "/pause"},
		26: {"26 (kubectl-tao) S 0 26 26", "/tao-stager/kubectl-tao\x00stage\x00run"},
		39: {"39 (sh) S 26 39 39", "/bin/sh\x00-c\x00orted"},
		40: {"40 (orted) S 39 39 39", "orted\x00-mca"},
		45: {"45 (python3) S 40 45 45", "python3\x00/opt/loop.py"},
		46: {"46 (python3) S 40 46 46", "python3\x00/opt/loop.py"},
		47: {"47 (python3) S 46 46 46", "python3\x00-c\x00worker"},
		63: {"63 (bash) S 0 63 63", "/bin/bash"},
		64: {"64 (python3) S 63 63 63", "python3"},
	} {
		dir := filepath.Join(proc, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range map[string]string{"stat": p.stat, "cmdline": p.cmdline + "\x00"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var got []string
	for _, p := range groupProcesses(proc, 39, 63) {
		got = append(got, fmt.Sprintf("%d %s %v", p.pid, p.cmdline, p.python))
	}
	want := []string{"39 /bin/sh -c orted false", "40 orted -mca false", "45 python3 /opt/loop.py true",
		"46 python3 /opt/loop.py true", "47 python3 -c worker true", "63 /bin/bash false", "64 python3 true"}
	if !slices.Equal(got, want) {
		t.Errorf("groups 39 and 63: %q, want %q", got, want)
	}
	if got := groupProcesses(proc, 39); len(got) != 5 {
		t.Errorf("group 39 alone: %d processes, want its 5", len(got))
	}
}

// The ranks share their signs of life through rank 0: a rank that prints nothing is alive
// while another prints, and the job is hung only when none has shown life for the timeout;
// the rank silent first is named.
func TestWatchdogSharesLife(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	timeout := time.Minute
	zero := newWatchdog(hangConfig{timeout: timeout, addr: addr, rank: 0, pod: "ddp-0-a", node: "n0"}, t.Logf)
	one := newWatchdog(hangConfig{timeout: timeout, addr: addr, rank: 1, pod: "ddp-1-b", node: "n1"}, t.Logf)
	zero.gpu, one.gpu = nil, nil
	if err := zero.serve(); err != nil {
		t.Fatal(err)
	}
	defer zero.close()
	base := time.Now()
	// Both started long ago: past the start's allowance.
	zero.start, one.start = base.Add(-time.Hour), base.Add(-time.Hour)
	one.own.Store(base.Add(-50 * time.Second).UnixNano())
	zero.own.Store(base.UnixNano())
	one.share(context.Background())
	if h := one.hung(base.Add(30 * time.Second)); h != nil {
		t.Fatalf("rank 1, silent 80 s while rank 0 printed 30 s ago, is called hung: %+v", h)
	}
	h := one.hung(base.Add(61 * time.Second))
	if h == nil || h.First.Rank != 1 || h.First.Node != "n1" || !h.Last.Equal(time.Unix(0, base.UnixNano())) {
		t.Fatalf("a minute after the last line of any rank: %+v", h)
	}
	// Rank 0 learnt rank 1's from its report.
	if h := zero.hung(base.Add(61 * time.Second)); h == nil || h.First.Rank != 1 {
		t.Errorf("rank 0: %+v", h)
	}
	if !strings.Contains(h.describe(), "rank 1 on node n1 went silent first") {
		t.Errorf("describe: %s", h.describe())
	}
}

// hangEnv is the pod's environment of a --hang-timeout job with a 1 s timeout.
func hangEnv(t *testing.T) map[string]string {
	return map[string]string{jobspec.EnvHangTimeout: "1", jobspec.EnvNodeName: "node-a", s3layout.EnvPodName: "train-0-aaaaa"}
}

// fakeSMI puts an nvidia-smi on PATH that reports util for every GPU.
func fakeSMI(t *testing.T, util int) {
	dir := t.TempDir()
	script := "#!/bin/sh\necho " + strconv.Itoa(util) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// A command that prints nothing, writes nothing and keeps no GPU busy for the timeout is
// ended as hung: exit 204, the hang said and left for diagnose. One that keeps writing
// checkpoint files, or whose GPUs read busy, is left alone.
func TestHang(t *testing.T) {
	t.Run("silent: ended, 204", func(t *testing.T) {
		fakeSMI(t, 3)
		env := hangEnv(t)
		term := filepath.Join(t.TempDir(), "termination-log")
		start := time.Now()
		r := superviseWith(t, env, "echo started; sleep 60", nil, func(s *Supervisor) { s.TerminationLog = term })
		// The start's allowance (twice the timeout), then the timeout.
		if took := time.Since(start); r.code != int(jobspec.ExitHang) || took < 2*time.Second || took > 20*time.Second ||
			!strings.Contains(r.stderr, "kubectl-tao: hang: no rank has printed a line, written a checkpoint file or kept a GPU busy for 1s") ||
			!strings.Contains(r.stderr, "rank 0 on node node-a went silent first") ||
			!strings.Contains(r.stderr, "no Python process of the command could dump its stacks") ||
			!strings.Contains(r.stderr, "exiting 204") {
			t.Fatalf("exit %d after %s; stderr:\n%s", r.code, time.Since(start), r.stderr)
		}
		msg, err := os.ReadFile(term)
		if err != nil || !strings.HasPrefix(string(msg), "hang: ") {
			t.Errorf("termination message %q (%v)", msg, err)
		}
	})
	t.Run("checkpoint files written: alive", func(t *testing.T) {
		fakeSMI(t, 0)
		env := hangEnv(t)
		dir := t.TempDir()
		env[s3layout.EnvStageCheckpointDir], env[s3layout.EnvStageCheckpointOnVolume] = dir, "1"
		r := supervise(t, env, `for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do echo $i > "$TAO_CHECKPOINT_DIR/step-$i.pt"; sleep 0.25; done`, nil)
		if r.code != 0 {
			t.Errorf("exit %d; stderr:\n%s", r.code, r.stderr)
		}
	})
	t.Run("GPU busy: alive", func(t *testing.T) {
		fakeSMI(t, 87)
		r := supervise(t, hangEnv(t), "echo start; sleep 4", nil)
		if r.code != 0 {
			t.Errorf("exit %d; stderr:\n%s", r.code, r.stderr)
		}
	})
	t.Run("printing: alive", func(t *testing.T) {
		fakeSMI(t, 0)
		r := supervise(t, hangEnv(t), "for i in 1 2 3 4 5 6 7 8; do echo $i; sleep 0.5; done", nil)
		if r.code != 0 {
			t.Errorf("exit %d; stderr:\n%s", r.code, r.stderr)
		}
	})
	t.Run("a timeout that is no number: the supervisor's code", func(t *testing.T) {
		r := supervise(t, map[string]string{jobspec.EnvHangTimeout: "30s"}, "echo ran", nil)
		if r.code != s3layout.ExitStageRun || r.stdout != "" || !strings.Contains(r.stderr, jobspec.EnvHangTimeout) {
			t.Errorf("exit %d, stdout %q; stderr:\n%s", r.code, r.stdout, r.stderr)
		}
	})
}
