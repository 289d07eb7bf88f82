package localcluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParsePidFile(t *testing.T) {
	rec, err := ParsePidFile("etcd", []byte("1234\n/cache/etcd-v3.6.16/etcd\n"))
	if err != nil || rec.PID != 1234 || rec.Exe != "/cache/etcd-v3.6.16/etcd" {
		t.Fatalf("got %+v, %v", rec, err)
	}
	for _, bad := range []string{"", "1234\n", "x\n/bin/etcd\n", "1\n/bin/etcd\n", "12\nrelative/etcd\n"} {
		if _, err := ParsePidFile("etcd", []byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestIsOurs(t *testing.T) {
	state := "/repo/.cluster"
	exe := "/cache/etcd"
	tests := []struct {
		name string
		info ProcInfo
		want bool
	}{
		{"ours", ProcInfo{Exe: exe, Cmdline: []string{exe, "--data-dir=/repo/.cluster/etcd"}}, true},
		{"other binary (pid reused)", ProcInfo{Exe: "/usr/bin/bash", Cmdline: []string{"bash", "/repo/.cluster/x"}}, false},
		{"same binary, other cluster", ProcInfo{Exe: exe, Cmdline: []string{exe, "--data-dir=/tmp/other/etcd"}}, false},
		{"zombie", ProcInfo{Exe: exe, Cmdline: []string{exe, "--data-dir=/repo/.cluster/etcd"}, Zombie: true}, false},
		{"state dir only in argv0", ProcInfo{Exe: exe, Cmdline: []string{"/repo/.cluster/etcd"}}, false},
		{"the state dir itself", ProcInfo{Exe: exe, Cmdline: []string{exe, "--state-dir=/repo/.cluster"}}, true},
		{"a cluster whose dir starts with ours", ProcInfo{Exe: exe, Cmdline: []string{exe, "--data-dir=/repo/.cluster-faults/etcd"}}, false},
		{"and its state dir", ProcInfo{Exe: exe, Cmdline: []string{exe, "--state-dir=/repo/.cluster-bench"}}, false},
	}
	for _, tt := range tests {
		if got := IsOurs(tt.info, exe, state); got != tt.want {
			t.Errorf("%s: IsOurs = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// sleepBinary returns a copy of sleep under dir, so the test's processes have an executable
// no other process on the machine uses.
func sleepBinary(t *testing.T, dir string) string {
	t.Helper()
	src, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "fake-component")
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestStartAndStopProcess(t *testing.T) {
	state := t.TempDir()
	exe := sleepBinary(t, t.TempDir())
	// The state dir must appear in the arguments for the process to count as ours; sleep
	// accepts extra duration arguments, so pass one that is a harmless path-looking string.
	p, err := startProcess(state, "etcd", exe, []string{"300"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopPid(p.pid, time.Second, ReadProc) })
	recs, errs := readPidFiles(state)
	if len(errs) > 0 || len(recs) != 1 || recs[0].PID != p.pid || recs[0].Exe != exe {
		t.Fatalf("pid files = %+v, %v", recs, errs)
	}
	info, ok := ReadProc(p.pid)
	if !ok || info.Exe != exe {
		t.Fatalf("ReadProc = %+v, %v", info, ok)
	}
	if IsOurs(info, exe, state) {
		t.Error("a process without the state dir in its arguments must not count as ours")
	}
	stopPid(p.pid, 5*time.Second, ReadProc)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Fatal("process still running after stopPid")
	}
}

func TestDownStopsOnlyOurProcessesAndRemovesState(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeMarker(state); err != nil {
		t.Fatal(err)
	}
	// "; :" stops the shell from exec'ing sleep, so the process keeps the shell as its
	// executable and the state dir in its arguments.
	p, err := startProcess(state, "kwok", "/bin/sh", []string{"-c", "sleep 300; : " + state})
	if err != nil {
		t.Fatal(err)
	}
	// An unrelated process running the same binary for another cluster must survive.
	other, err := startProcess(t.TempDir(), "kwok", "/bin/sh", []string{"-c", "sleep 300; : elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopPid(other.pid, time.Second, ReadProc) })

	cfg := Config{StateDir: state, CacheDir: t.TempDir()}
	if err := Down(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Fatal("our process still running after Down")
	}
	if exited, _ := other.exited(); exited {
		t.Error("Down stopped a process of another cluster")
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("state dir still there: %v", err)
	}
}

func TestDownWithStalePidFiles(t *testing.T) {
	state := t.TempDir()
	if err := writeMarker(state); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(state, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	// pid 1 is never ours; a pid that does not exist is stale; a garbled file is reported.
	files := map[string]string{"etcd.pid": "1\n/cache/etcd\n", "kwok.pid": "999999999\n/cache/kwok\n", "logsim.pid": "junk"}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(state, "run", name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	if err := Down(context.Background(), Config{StateDir: state, CacheDir: t.TempDir(), Progress: &out}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("stale state not removed")
	}
	if !strings.Contains(out.String(), "logsim") {
		t.Errorf("garbled pid file not reported:\n%s", out.String())
	}
}

func TestDownRefusesForeignDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "precious.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Down(context.Background(), Config{StateDir: dir, CacheDir: t.TempDir()}); err == nil {
		t.Fatal("Down deleted a directory it did not create")
	}
	if _, err := os.Stat(filepath.Join(dir, "precious.txt")); err != nil {
		t.Fatal(err)
	}
	if err := Up(context.Background(), Config{StateDir: dir, CacheDir: t.TempDir(), Nodes: 1}); err == nil || !strings.Contains(err.Error(), "not made by localcluster") {
		t.Errorf("Up into a foreign directory: %v", err)
	}
}

func TestClassifyDir(t *testing.T) {
	base := t.TempDir()
	if k, _ := classifyDir(filepath.Join(base, "nope")); k != dirAbsent {
		t.Errorf("absent = %v", k)
	}
	if k, _ := classifyDir(base); k != dirEmpty {
		t.Errorf("empty = %v", k)
	}
	if err := writeMarker(base); err != nil {
		t.Fatal(err)
	}
	if k, _ := classifyDir(base); k != dirOurs {
		t.Errorf("marked = %v", k)
	}
}

// TestExitedWhole: a process counts as gone only once every thread has exited. Read off
// /proc/PID/stat of a C program whose main thread called pthread_exit with two threads still
// running (Z, 3 threads), then of the same once they had ended (Z, 1).
func TestExitedWhole(t *testing.T) {
	const tail = " 1 1 1 0 -1 4194560 30 0 0 0 0 0 0 0 20 0 %s 0 783669 0 0 18446744073709551615"
	for _, tc := range []struct {
		name, stat string
		want       bool
	}{
		{"running", "42 (kube-apiserver) S" + strings.Replace(tail, "%s", "12", 1), false},
		{"main thread gone, others still exiting", "42 (kube-apiserver) Z" + strings.Replace(tail, "%s", "3", 1), false},
		{"every thread gone", "42 (kube-apiserver) Z" + strings.Replace(tail, "%s", "1", 1), true},
		{"dead", "42 (etcd) X" + strings.Replace(tail, "%s", "0", 1), true},
		{"a name with spaces and parentheses", "42 (a (b) c) Z" + strings.Replace(tail, "%s", "1", 1), true},
		{"cut short", "42 (etcd) Z 1 1", false},
		{"no name", "garbage", false},
	} {
		if got := exitedWhole([]byte(tc.stat)); got != tc.want {
			t.Errorf("%s: exitedWhole = %v, want %v", tc.name, got, tc.want)
		}
	}
}
