package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Stacks on demand. py-spy, where the image has it, reads a Python process's stacks from the
// outside. Where it does not, the supervisor has every Python process of the command register
// Python's own faulthandler for StacksSignal at its start, without touching the user's code: a
// sitecustomize module on PYTHONPATH that registers the handler and then imports the user's own
// sitecustomize, if any. The handler writes to a file per process in StacksDir, so a dump taken
// while the job trains goes neither into its log nor in its way; the hang watchdog copies it
// into the log.

// StacksSignal is the signal the command's Python processes dump their stacks on: a real-time
// signal, which no common framework uses (PyTorch Lightning and submitit take SIGUSR1 and
// SIGUSR2 for requeueing). Its default action ends a process, so only the processes that
// registered the handler (their file exists) are sent it.
const StacksSignal = syscall.Signal(42)

// Environment the command's Python processes read in the sitecustomize.
const (
	envStacksDir    = "TAO_STACKS_DIR"
	envStacksSignal = "TAO_STACKS_SIGNAL"
	envPythonPath   = "PYTHONPATH"
)

// groupFile in StacksDir holds the command's process group id, for `stage stacks` (run by
// `kubectl tao stacks` through exec, outside the supervisor).
const groupFile = "group"

// StacksDir is where the dumps and the sitecustomize go: the container's temporary directory,
// the same for the supervisor and for a process exec'd into the container.
func StacksDir() string { return filepath.Join(os.TempDir(), "kubectl-tao-stacks") }

// sitecustomize registers the dump and chains to the user's own sitecustomize, which Python
// would otherwise no longer import (it imports the first one on the path).
const sitecustomize = `# Written by kubectl-tao's supervisor: Python dumps its stacks on a signal (kubectl tao stacks).
import os, sys


def _kubectl_tao_stacks():
    try:
        import faulthandler
        d = os.environ.get("` + envStacksDir + `")
        n = int(os.environ.get("` + envStacksSignal + `", "0"))
        if d and n:
            f = open(os.path.join(d, str(os.getpid())), "a")
            faulthandler.register(n, file=f, all_threads=True, chain=False)
            return f
    except Exception:
        return None


_kubectl_tao_stacks_file = _kubectl_tao_stacks()

_here = os.path.dirname(os.path.abspath(__file__))
_path = sys.path[:]
try:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    del sys.modules["sitecustomize"]
    try:
        import sitecustomize  # the user's own, if any
    except ModuleNotFoundError as e:
        if e.name != "sitecustomize":
            raise
finally:
    sys.path[:] = _path
`

// prepareStacks writes the sitecustomize and returns what the command's environment gains;
// nothing (and a reason) when the temporary directory cannot be written.
func prepareStacks(environ []string) ([]string, error) {
	dir := StacksDir()
	site := filepath.Join(dir, "python")
	if err := os.MkdirAll(site, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(site, "sitecustomize.py"), []byte(sitecustomize), 0o644); err != nil {
		return nil, err
	}
	path := site
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, envPythonPath+"="); ok && v != "" {
			path += string(os.PathListSeparator) + v
		}
	}
	return []string{envPythonPath + "=" + path, envStacksDir + "=" + dir, envStacksSignal + "=" + strconv.Itoa(int(StacksSignal))}, nil
}

// recordGroup notes the command's process group for `stage stacks`, in place of any before.
func recordGroup(pgid int) {
	_ = os.WriteFile(filepath.Join(StacksDir(), groupFile), []byte(strconv.Itoa(pgid)+"\n"), 0o644)
}

// addGroup adds a process group to those `stage stacks` reads: a command the MPI agent runs
// in this pod (a daemon, whose processes are the job's here too).
func addGroup(pgid int) {
	f, err := os.OpenFile(filepath.Join(StacksDir(), groupFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	_, _ = f.WriteString(strconv.Itoa(pgid) + "\n")
	_ = f.Close()
}

// RecordedGroups are the process groups of what the supervisor runs in this container: the
// command's, and in an MPI job those of the commands its agent runs.
func RecordedGroups() ([]int, error) {
	raw, err := os.ReadFile(filepath.Join(StacksDir(), groupFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errors.New("no command runs under the supervisor in this container")
	}
	if err != nil {
		return nil, err
	}
	var groups []int
	for _, f := range strings.Fields(string(raw)) {
		g, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a process group", groupFile, f)
		}
		groups = append(groups, g)
	}
	if len(groups) == 0 {
		return nil, errors.New("no command runs under the supervisor in this container")
	}
	return groups, nil
}

// process is one process of the command's group.
type process struct {
	pid     int
	cmdline string
	python  bool
}

// groupProcesses lists the processes of the process groups pgids and all their descendants,
// from /proc: a launcher may put the processes it starts in groups of their own (OpenMPI's
// daemons and mpirun do), and they are the command's all the same.
func groupProcesses(proc string, pgids ...int) []process {
	entries, _ := os.ReadDir(proc)
	parent := map[int]int{}
	in := map[int]bool{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(proc, e.Name(), "stat"))
		if err != nil {
			continue
		}
		ppid, group := statIDs(string(stat))
		if group < 0 {
			continue
		}
		parent[pid] = ppid
		in[pid] = slices.Contains(pgids, group)
	}
	// A process is the command's when it or an ancestor is in the group.
	var mine func(pid int, depth int) bool
	mine = func(pid, depth int) bool {
		if in[pid] {
			return true
		}
		p, ok := parent[pid]
		if !ok || p <= 1 || depth > len(parent) {
			return false
		}
		return mine(p, depth+1)
	}
	var out []process
	for pid := range parent {
		if !mine(pid, 0) {
			continue
		}
		dir := filepath.Join(proc, strconv.Itoa(pid))
		raw, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		exe, _ := os.Readlink(filepath.Join(dir, "exe"))
		out = append(out, process{pid: pid, cmdline: strings.Join(args, " "), python: isPython(exe) || isPython(args[0])})
	}
	slices.SortFunc(out, func(a, b process) int { return a.pid - b.pid })
	return out
}

// statGroup is the process group in a /proc/PID/stat line, -1 when it cannot be read.
func statGroup(stat string) int {
	_, g := statIDs(stat)
	return g
}

// statIDs are the parent and the process group in a /proc/PID/stat line, -1 and -1 when they
// cannot be read. The command name in parentheses may hold spaces and parentheses: the fields
// follow the last ")".
func statIDs(stat string) (ppid, pgrp int) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return -1, -1
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 3 {
		return -1, -1
	}
	p, err1 := strconv.Atoi(f[1])
	g, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return -1, -1
	}
	return p, g
}

var pythonName = regexp.MustCompile(`^python[0-9.]*$`)

func isPython(path string) bool { return pythonName.MatchString(filepath.Base(path)) }

// DumpStacks writes the stacks of every Python process of the process groups pgids to w, each
// under a header naming it, and returns the innermost frames it saw (one per thread). It does
// not stop them: py-spy reads them from outside, the faulthandler dump runs in a signal handler.
func DumpStacks(ctx context.Context, pgids []int, w io.Writer) ([]string, error) {
	procs := groupProcesses("/proc", pgids...)
	spy, _ := exec.LookPath("py-spy")
	var frames []string
	dumped := 0
	for _, p := range procs {
		var out []byte
		how := ""
		if spy != "" && p.python {
			var err error
			if out, err = pySpyDump(ctx, spy, p.pid); err == nil {
				how = "py-spy"
				frames = append(frames, PySpyInnermost(string(out))...)
			}
		}
		if how == "" {
			var err error
			out, err = faultDump(ctx, p.pid)
			if err != nil {
				continue // not a Python process that registered the dump
			}
			how = "faulthandler"
			frames = append(frames, FaulthandlerInnermost(string(out))...)
		}
		dumped++
		fmt.Fprintf(w, "--- process %d (%s), by %s ---\n", p.pid, p.cmdline, how)
		_, _ = w.Write(out)
		if len(out) > 0 && out[len(out)-1] != '\n' {
			fmt.Fprintln(w)
		}
	}
	if dumped == 0 {
		names := make([]string, 0, len(procs))
		for _, p := range procs {
			names = append(names, strconv.Itoa(p.pid)+" "+p.cmdline)
		}
		return nil, fmt.Errorf("no Python process of the command could dump its stacks (the command's processes: %s): py-spy is not in the image and no process registered Python's faulthandler", strings.Join(names, "; "))
	}
	return frames, nil
}

// PySpyArgs is how py-spy is asked for a process's stacks: every thread, without stopping it
// (--nonblocking: a sample may be torn, the training never waits).
func PySpyArgs(pid int) []string {
	return []string{"dump", "--pid", strconv.Itoa(pid), "--nonblocking"}
}

func pySpyDump(ctx context.Context, spy string, pid int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, spy, PySpyArgs(pid)...).Output()
}

// faultDump signals a process that registered the dump and returns what it wrote.
func faultDump(ctx context.Context, pid int) ([]byte, error) {
	path := filepath.Join(StacksDir(), strconv.Itoa(pid))
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	before, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, err
	}
	if err := signalProcess(pid, StacksSignal); err != nil {
		return nil, err
	}
	// The dump is written at once by the handler; it is whole once the file stops growing.
	deadline := time.Now().Add(5 * time.Second)
	size, still := before, 0
	for time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		info, err := f.Stat()
		if err != nil {
			return nil, err
		}
		switch {
		case info.Size() > size:
			size, still = info.Size(), 0
		case info.Size() > before:
			if still++; still >= 4 {
				return io.ReadAll(io.NewSectionReader(f, before, size-before))
			}
		}
	}
	if size > before {
		return io.ReadAll(io.NewSectionReader(f, before, size-before))
	}
	return nil, fmt.Errorf("process %d wrote no stacks", pid)
}

var (
	// faulthandler: `  File "train.py", line 12 in main` under `Thread 0x... (most recent call first):`.
	faultThread = regexp.MustCompile(`^(Current thread|Thread) 0x[0-9a-f]+ .*\(most recent call first\):$`)
	faultFrame  = regexp.MustCompile(`^\s+File "([^"]*)", line (\d+) in (.*)$`)
	// py-spy: `    all_reduce (torch/distributed/distributed_c10d.py:2050)` under `Thread 123 (idle): "MainThread"`.
	spyThread = regexp.MustCompile(`^Thread (0x[0-9A-Fa-f]+|\d+) \(`)
	spyFrame  = regexp.MustCompile(`^\s+(\S.*) \(([^:()]*)(?::(\d+))?\)$`)
)

// FaulthandlerInnermost is the innermost frame of each thread in a faulthandler dump, as
// "FUNCTION (FILE:LINE)", the thread that took the signal (the main one in Python) first.
func FaulthandlerInnermost(dump string) []string {
	var out []string
	want, current := false, false
	for _, l := range strings.Split(dump, "\n") {
		t := strings.TrimSpace(l)
		switch {
		case faultThread.MatchString(t):
			want, current = true, strings.HasPrefix(t, "Current thread")
		case want:
			if m := faultFrame.FindStringSubmatch(l); m != nil {
				out = addFrame(out, m[3]+" ("+m[1]+":"+m[2]+")", current)
				want = false
			}
		}
	}
	return out
}

// PySpyInnermost is the innermost frame of each thread in a py-spy dump, as
// "FUNCTION (FILE:LINE)", the main thread's first.
func PySpyInnermost(dump string) []string {
	var out []string
	want, main := false, false
	for _, l := range strings.Split(dump, "\n") {
		switch {
		case spyThread.MatchString(l):
			want, main = true, strings.HasSuffix(strings.TrimSpace(l), `"MainThread"`)
		case want:
			if m := spyFrame.FindStringSubmatch(l); m != nil {
				where := m[2]
				if m[3] != "" {
					where += ":" + m[3]
				}
				out = addFrame(out, m[1]+" ("+where+")", main)
				want = false
			}
		}
	}
	return out
}

func addFrame(frames []string, f string, first bool) []string {
	if first {
		return append([]string{f}, frames...)
	}
	return append(frames, f)
}

// summary is a bounded one-line list of frames, each once, in order.
func summary(frames []string, limit int) string {
	var seen []string
	for _, f := range frames {
		if !slices.Contains(seen, f) {
			seen = append(seen, f)
		}
	}
	if len(seen) > limit {
		seen = append(seen[:limit], fmt.Sprintf("and %d more", len(seen)-limit))
	}
	return strings.Join(seen, "; ")
}

// writeTerminationMessage leaves msg where the kubelet reads the container's termination
// message, so that diagnose has it without reading the log; a container without the file
// writable loses nothing else.
func writeTerminationMessage(path, msg string) {
	if path == "" {
		return
	}
	// The kubelet keeps 4096 bytes of it.
	b := []byte(msg)
	if len(b) > 4000 {
		b = append(bytes.Clone(b[:4000]), "..."...)
	}
	_ = os.WriteFile(path, b, 0o644)
}
