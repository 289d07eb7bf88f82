package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/testbuf"
)

// runMain makes this test binary the trainer itself, so the tests can run it as a process and
// signal it, the way the kubelet does.
const runMain = "TRAINER_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMain) == "1" {
		os.Exit(run(os.Args, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestRendezvousThreeRanksOnLoopback(t *testing.T) {
	// A port that was free a moment ago: the peers start first, as they may in a cluster where
	// rank 0's pod starts last, and must keep retrying until rank 0 listens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const world = 3
	outs := make([]*testbuf.Buffer, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := 1; r < world; r++ {
		outs[r] = &testbuf.Buffer{}
		wg.Go(func() {
			tr := &trainer{rank: r, out: outs[r]}
			errs[r] = tr.joinRendezvous(ctx, "localhost", port, world)
		})
	}
	time.Sleep(300 * time.Millisecond)
	ln, err = net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	outs[0] = &testbuf.Buffer{}
	errs[0] = (&trainer{rank: 0, out: outs[0]}).serveRendezvous(ctx, ln, world)
	wg.Wait()
	for r := range world {
		if errs[r] != nil {
			t.Errorf("rank %d: %v\n%s", r, errs[r], outs[r])
		}
		if want := fmt.Sprintf("rank %d barrier passed, world size 3\n", r); !strings.Contains(outs[r].String(), want) {
			t.Errorf("rank %d printed %q, want %q in it", r, outs[r], want)
		}
	}
	if !strings.Contains(outs[0].String(), "rank 0 saw peers 1,2\n") {
		t.Errorf("rank 0 printed %q, want it to have seen peers 1,2", outs[0])
	}
	for r := 1; r < world; r++ {
		out := outs[r].String()
		if !strings.Contains(out, "connected to rank 0 at 127.0.0.1:"+port) || !strings.Contains(out, "rank "+strconv.Itoa(r)+" waiting: ") {
			t.Errorf("rank %d printed %q, want a wait for rank 0 and a connection to 127.0.0.1:%s", r, out, port)
		}
	}
}

func TestRendezvousRefusesAMismatchedWorldSize(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var joinErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		joinErr = (&trainer{rank: 1, out: io.Discard}).joinRendezvous(ctx, "127.0.0.1", port, 2)
	}()
	serveErr := (&trainer{rank: 0, out: io.Discard}).serveRendezvous(ctx, ln, 3)
	<-done
	if serveErr == nil || !strings.Contains(serveErr.Error(), "world size 2, rank 0 has 3") {
		t.Errorf("rank 0: %v, want a world size mismatch", serveErr)
	}
	if joinErr == nil || !strings.Contains(joinErr.Error(), "rank 0 refused") {
		t.Errorf("rank 1: %v, want rank 0's refusal", joinErr)
	}
}

func TestRendezvousGivesUpAfterTheTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	out := &testbuf.Buffer{}
	// Port 1 on loopback: nothing listens there, the connection is refused at once.
	err := (&trainer{rank: 1, out: out}).joinRendezvous(ctx, "127.0.0.1", "1", 2)
	if err == nil || !strings.Contains(err.Error(), "not reached") || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("err = %v, want rank 0 not reached (connection refused)", err)
	}
	if n := strings.Count(out.String(), "waiting:"); n != 1 {
		t.Errorf("printed the same waiting reason %d times, want once:\n%s", n, out)
	}
}

// proc is a trainer running as a process.
type proc struct {
	cmd   *exec.Cmd
	out   *testbuf.Buffer
	lines chan string
	done  chan struct{}
}

func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	// Each run writes its checkpoints under a directory of its own: the default, shared by every
	// user of the machine, may belong to another user's run.
	cmd.Env = append([]string{runMain + "=1", "PATH=" + os.Getenv("PATH"), envResultsRoot + "=" + t.TempDir()}, env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, out: &testbuf.Buffer{}, lines: make(chan string, 1000), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			fmt.Fprintln(p.out, sc.Text())
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("trainer %q stdout:\n%s\nstderr:\n%s", args, p.out, stderr.String())
		}
	})
	return p
}

// waitLine waits for a line matching re and returns its submatches.
func (p *proc) waitLine(t *testing.T, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l := <-p.lines:
			if m := rx.FindStringSubmatch(l); m != nil {
				return m
			}
		case <-timeout:
			t.Fatalf("no line matching %q in:\n%s", re, p.out)
		}
	}
}

// wait waits for the process to exit and returns its exit code (-1 when a signal ended it).
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	<-p.done
	err := p.cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return p.cmd.ProcessState.ExitCode()
}

func TestSIGTERMWritesAFinalCheckpointAndExits143(t *testing.T) {
	dir := t.TempDir()
	p := start(t, nil, "--steps", "100000", "--step-delay", "20ms", "--results", dir)
	p.waitLine(t, `^rank 0 step 3$`)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != exitSignalled {
		t.Fatalf("exit code %d, want %d", code, exitSignalled)
	}
	lines := strings.Split(strings.TrimSpace(p.out.String()), "\n")
	last := lines[len(lines)-1]
	m := regexp.MustCompile(`^rank 0 got SIGTERM at step (\d+), wrote final checkpoint (\S+)$`).FindStringSubmatch(last)
	if m == nil {
		t.Fatalf("last line %q, want the SIGTERM line", last)
	}
	if want := filepath.Join(dir, "rank-0", "final"); m[2] != want {
		t.Errorf("final checkpoint at %s, want %s", m[2], want)
	}
	data, err := os.ReadFile(m[2])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), "rank=0 step="+m[1]+" ") {
		t.Errorf("final checkpoint %q, want step %s in it", data, m[1])
	}
}

func TestStepsCheckpointsAndExitCode(t *testing.T) {
	dir := t.TempDir()
	p := start(t, nil, "--steps", "2", "--exit", "7", "--results", dir)
	if code := p.wait(t); code != 7 {
		t.Fatalf("exit code %d, want 7", code)
	}
	for k := 1; k <= 2; k++ {
		path := filepath.Join(dir, "rank-0", fmt.Sprintf("ckpt-%06d", k))
		if !strings.Contains(p.out.String(), fmt.Sprintf("rank 0 step %d\nrank 0 checkpoint %s\n", k, path)) {
			t.Errorf("no step %d and checkpoint %s in:\n%s", k, path, p.out)
		}
		if _, err := os.Stat(path); err != nil {
			t.Error(err)
		}
	}
	if !strings.HasSuffix(p.out.String(), "rank 0 done, exit code 7\n") {
		t.Errorf("output does not end with the done line:\n%s", p.out)
	}
}

func TestTwoRankProcessesRendezvous(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	dir := t.TempDir()
	var ps []*proc
	for r := range 2 {
		env := []string{"WORLD_SIZE=2", "NNODES=2", "NODE_RANK=" + strconv.Itoa(r), "JOB_COMPLETION_INDEX=" + strconv.Itoa(r),
			"MASTER_ADDR=localhost", "MASTER_PORT=" + port}
		ps = append(ps, start(t, env, "--steps", "2", "--results", dir))
	}
	for r, p := range ps {
		if code := p.wait(t); code != 0 {
			t.Fatalf("rank %d exit code %d", r, code)
		}
		out := p.out.String()
		var info map[string]any
		m := regexp.MustCompile(`(?m)^rank \d+ info (.*)$`).FindStringSubmatch(out)
		if m == nil || json.Unmarshal([]byte(m[1]), &info) != nil {
			t.Fatalf("rank %d: no info line in:\n%s", r, out)
		}
		if info["rank"] != float64(r) || info["world_size"] != float64(2) || info["node_rank"] != strconv.Itoa(r) || info["master_addr"] != "localhost" {
			t.Errorf("rank %d info %v", r, info)
		}
		for _, want := range []string{"barrier passed, world size 2", "step 2", "done, exit code 0"} {
			if !strings.Contains(out, fmt.Sprintf("rank %d %s\n", r, want)) {
				t.Errorf("rank %d: no %q in:\n%s", r, want, out)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "rank-"+strconv.Itoa(r), "ckpt-000002")); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(ps[0].out.String(), "rank 0 saw peers 1\n") {
		t.Errorf("rank 0 did not see rank 1:\n%s", ps[0].out)
	}
}

func TestBadRendezvousVariables(t *testing.T) {
	for _, env := range [][]string{
		{"WORLD_SIZE=2", "MASTER_ADDR=x", "MASTER_PORT=1"},                // no NODE_RANK
		{"WORLD_SIZE=2", "NODE_RANK=2", "MASTER_ADDR=x", "MASTER_PORT=1"}, // rank out of range
		{"WORLD_SIZE=two"}, // not a number
		{"WORLD_SIZE=2", "NODE_RANK=1", "MASTER_ADDR=", "MASTER_PORT=1"},   // empty address
		{"WORLD_SIZE=2", "NODE_RANK=-1", "MASTER_ADDR=x", "MASTER_PORT=1"}, // negative rank
	} {
		p := start(t, env)
		if code := p.wait(t); code != 2 {
			t.Errorf("env %q: exit code %d, want 2", env, code)
		}
	}
}

// tricky are argv entries and environment values a shell or the kubelet would mangle; the test
// trainer must print them exactly, invalid UTF-8 included.
var tricky = []string{"a b", "it's", "$(HOME)", "$$", "a\nb", "üñí ✓", "", "--", "-c", "\xff\xfe", ";"}

func TestPrintArgsIsByteExact(t *testing.T) {
	args := append([]string{"--print-args", "--steps", "0", "--"}, tricky...)
	p := start(t, []string{"TRICKY=" + strings.Join(tricky, "|")}, args...)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	m := regexp.MustCompile(`(?m)^rank 0 argv (.*)$`).FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatalf("no argv line in:\n%s", p.out)
	}
	var got struct {
		ArgsHex []string `json:"args_hex"`
		EnvHex  []string `json:"env_hex"`
	}
	if err := json.Unmarshal([]byte(m[1]), &got); err != nil {
		t.Fatal(err)
	}
	args = append([]string{p.cmd.Path}, args...)
	if len(got.ArgsHex) != len(args) {
		t.Fatalf("%d args printed, want %d", len(got.ArgsHex), len(args))
	}
	for i, h := range got.ArgsHex {
		if b, _ := hex.DecodeString(h); string(b) != args[i] {
			t.Errorf("arg %d = %q, want %q", i, b, args[i])
		}
	}
	var env []string
	for _, h := range got.EnvHex {
		b, _ := hex.DecodeString(h)
		env = append(env, string(b))
	}
	if want := "TRICKY=" + strings.Join(tricky, "|"); !containsString(env, want) {
		t.Errorf("env %q lacks %q", env, want)
	}
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestSpecFileIsPrinted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spec.yaml")
	content := "model: x\nlr: 0.1 # ü\n" + "\xff"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, nil, "--spec", path, "--steps", "0")
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	m := regexp.MustCompile(`(?m)^rank 0 spec (.*)$`).FindStringSubmatch(p.out.String())
	var got struct {
		Path, Hex string
		Bytes     int
	}
	if m == nil || json.Unmarshal([]byte(m[1]), &got) != nil {
		t.Fatalf("no spec line in:\n%s", p.out)
	}
	if b, _ := hex.DecodeString(got.Hex); string(b) != content || got.Path != path || got.Bytes != len(content) {
		t.Errorf("spec line %+v, want %q from %s", got, content, path)
	}

	p = start(t, nil, "--spec", filepath.Join(t.TempDir(), "absent"), "--steps", "0")
	if code := p.wait(t); code != 1 || !strings.Contains(p.out.String(), "no such file") {
		t.Errorf("absent spec: exit code %d, output:\n%s", code, p.out)
	}
}

func TestServesHTTP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	p := start(t, nil, "--http", port, "--steps", "1", "--hold", "1m")
	p.waitLine(t, `^rank 0 holding`)
	resp, err := http.Get("http://127.0.0.1:" + port + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "trainer rank 0 step 1\n" {
		t.Errorf("body %q", body)
	}
}

func TestEatsMemoryUntilKilled(t *testing.T) {
	p := start(t, nil, "--eat-memory")
	p.waitLine(t, `^rank 0 allocated 64 MiB$`)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
	if strings.Contains(p.out.String(), "step") {
		t.Errorf("started training while eating memory:\n%s", p.out)
	}
}

func TestInfoLineReportsGPUsAndShm(t *testing.T) {
	p := start(t, []string{"NVIDIA_VISIBLE_DEVICES=GPU-0,GPU-3"}, "--steps", "0")
	p.wait(t)
	m := regexp.MustCompile(`(?m)^rank 0 info (.*)$`).FindStringSubmatch(p.out.String())
	var info struct {
		GPUs string   `json:"nvidia_visible_devices"`
		IPs  []string `json:"ips"`
		Shm  *fsInfo  `json:"shm"`
	}
	if m == nil || json.Unmarshal([]byte(m[1]), &info) != nil {
		t.Fatalf("no info line in:\n%s", p.out)
	}
	if info.GPUs != "GPU-0,GPU-3" {
		t.Errorf("nvidia_visible_devices = %q", info.GPUs)
	}
	if want := ownIPs(); !slices.Equal(info.IPs, want) {
		t.Errorf("ips = %q, want %q", info.IPs, want)
	}
	if st, err := statFS("/dev/shm"); err == nil && (info.Shm == nil || *info.Shm != st) {
		t.Errorf("shm = %+v, want %+v", info.Shm, st)
	}
}
