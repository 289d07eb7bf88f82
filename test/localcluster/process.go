package localcluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a component process this launcher started in this run. Keeping the exec.Cmd lets us
// reap it (so a dead component is noticed at once, not as a zombie that still "exists") and
// report its exit status with the tail of its log.
type proc struct {
	name    string
	pid     int
	exe     string
	logPath string
	done    chan struct{}
	waitErr error
}

// exited reports whether the process has ended, with its wait error.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// exitError describes an early exit with the last lines of the component's log, which is
// almost always where the reason is (a bad flag, a port in use).
func (p *proc) exitError() error {
	_, werr := p.exited()
	return fmt.Errorf("%s exited early (%v); last lines of %s:\n%s", p.name, werr, p.logPath, tailFile(p.logPath, 15))
}

// startProcess starts exe detached in its own process group, with output appended to
// <state>/logs/<name>.log, and records it in <state>/run/<name>.pid before returning so even a
// launcher killed right now leaves a record that Down can use.
func startProcess(stateDir, name, exe string, args []string) (*proc, error) {
	return startProcessEnv(stateDir, name, exe, args, nil, nil)
}

// startProcessEnv is startProcess with extra environment (appended to ours, so it wins) and
// extra open files, which the child gets as fds 3, 4, ...
func startProcessEnv(stateDir, name, exe string, args, env []string, extra []*os.File) (*proc, error) {
	// /proc/<pid>/exe shows the resolved path; record that so ownership checks compare alike.
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	logPath := filepath.Join(stateDir, "logs", name+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, fmt.Errorf("create log directory for %s: %w", name, err)
	}
	if err := os.MkdirAll(filepath.Join(stateDir, "run"), 0o755); err != nil {
		return nil, fmt.Errorf("create pid directory for %s: %w", name, err)
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log for %s: %w", name, err)
	}
	defer logFile.Close()

	cmd := exec.Command(exe, args...)
	cmd.Dir = stateDir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.ExtraFiles = extra
	// A new process group detaches the component from the terminal's Ctrl-C (Up handles that
	// itself and tears down in order) and lets Stop signal the component with any children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, exe, err)
	}
	p := &proc{name: name, pid: cmd.Process.Pid, exe: exe, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := writePidFile(stateDir, name, p.pid, exe); err != nil {
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		<-p.done
		return nil, err
	}
	return p, nil
}

// pidFile is <state>/run/<name>.pid: the pid on the first line (as tools expect) and the
// executable on the second, which Stop checks so a reused pid is never signalled.
func pidFilePath(stateDir, name string) string {
	return filepath.Join(stateDir, "run", name+".pid")
}

func writePidFile(stateDir, name string, pid int, exe string) error {
	data := fmt.Sprintf("%d\n%s\n", pid, exe)
	if err := os.WriteFile(pidFilePath(stateDir, name), []byte(data), 0o644); err != nil {
		return fmt.Errorf("write pid file for %s: %w", name, err)
	}
	return nil
}

// PidRecord is what a pid file says about a component.
type PidRecord struct {
	Name string
	PID  int
	Exe  string
}

// ParsePidFile reads a pid file written by startProcess.
func ParsePidFile(name string, data []byte) (PidRecord, error) {
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 {
		return PidRecord{}, fmt.Errorf("pid file for %s: want 2 lines (pid, executable), got %d", name, len(lines))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || pid <= 1 {
		return PidRecord{}, fmt.Errorf("pid file for %s: bad pid %q", name, lines[0])
	}
	exe := strings.TrimSpace(lines[1])
	if !filepath.IsAbs(exe) {
		return PidRecord{}, fmt.Errorf("pid file for %s: executable %q is not absolute", name, exe)
	}
	return PidRecord{Name: name, PID: pid, Exe: exe}, nil
}

// readPidFiles returns the records under <state>/run; unreadable files are reported, not
// fatal, because Down must still stop whatever else it can.
func readPidFiles(stateDir string) ([]PidRecord, []error) {
	entries, err := os.ReadDir(filepath.Join(stateDir, "run"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, []error{fmt.Errorf("read pid directory: %w", err)}
	}
	var recs []PidRecord
	var errs []error
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".pid")
		if !ok {
			continue
		}
		data, err := os.ReadFile(filepath.Join(stateDir, "run", e.Name()))
		if err != nil {
			errs = append(errs, fmt.Errorf("read pid file %s: %w", e.Name(), err))
			continue
		}
		rec, err := ParsePidFile(name, data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		recs = append(recs, rec)
	}
	return recs, errs
}

// pidRecordsByName indexes the records under <state>/run by component name.
func pidRecordsByName(stateDir string) (map[string]PidRecord, []error) {
	recs, errs := readPidFiles(stateDir)
	byName := map[string]PidRecord{}
	for _, r := range recs {
		byName[r.Name] = r
	}
	return byName, errs
}

// printProcessStates prints one line per component ("running (pid N)", "not running (pid N)",
// "no pid file") and returns how many do not run.
func printProcessStates(out io.Writer, stateDir string, names []string) int {
	byName, _ := pidRecordsByName(stateDir)
	problems := 0
	for _, name := range names {
		state := "no pid file"
		if r, ok := byName[name]; ok {
			state = fmt.Sprintf("not running (pid %d)", r.PID)
			if info, alive := ReadProc(r.PID); alive && IsOurs(info, r.Exe, stateDir) {
				state = fmt.Sprintf("running (pid %d)", r.PID)
			}
		}
		if !strings.HasPrefix(state, "running") {
			problems++
		}
		fmt.Fprintf(out, "%-24s %s\n", name, state)
	}
	return problems
}

// ProcInfo is what /proc says about a pid, enough to decide whether it is one of ours.
type ProcInfo struct {
	Exe     string
	Cmdline []string
	// Zombie: every thread has exited, only the exit status waits to be reaped, and the
	// process holds nothing any more. A Go program's main thread can show as a zombie while its
	// other threads are still exiting and still hold its files, the listening socket among
	// them; that process is not a zombie here (a restart that took it for gone started the new
	// kube-apiserver on a port still bound, in CI).
	Zombie bool
}

// ProcReader reads process information; injected so ownership rules can be tested without
// real processes.
type ProcReader func(pid int) (ProcInfo, bool)

// ReadProc reads /proc/<pid>. It reports false when the process does not exist.
func ReadProc(pid int) (ProcInfo, bool) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return ProcInfo{}, false
	}
	info := ProcInfo{Zombie: exitedWhole(stat)}
	if exe, err := os.Readlink(filepath.Join(dir, "exe")); err == nil {
		// A binary replaced by a rebuild while running shows up as "path (deleted)"; it is
		// still the same component.
		info.Exe = strings.TrimSuffix(exe, " (deleted)")
	}
	if cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
		info.Cmdline = strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	}
	return info, true
}

// exitedWhole reads /proc/<pid>/stat: the state is zombie (or dead) and no thread but the
// leader's exit record is left (num_threads, field 20, counts the threads still running).
func exitedWhole(stat []byte) bool {
	// The fields follow the parenthesised command name, which may itself hold spaces.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return false
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 18 || (fields[0] != "Z" && fields[0] != "X") {
		return false
	}
	threads, err := strconv.Atoi(fields[17])
	return err == nil && threads <= 1
}

// IsOurs reports whether info describes a live process running exe with stateDir somewhere in
// its arguments. Every component gets paths under the state dir on its command line, so this
// tells our process apart from a reused pid, or from the same binary serving another cluster.
func IsOurs(info ProcInfo, exe, stateDir string) bool {
	if info.Zombie || info.Exe != exe {
		return false
	}
	// The state dir as a whole path element: /repo/.cluster-faults is not in
	// /repo/.cluster-faults-heavy/etcd (it was, and a cluster coming up in the first killed the
	// second's components as its own leftovers; found running both at once).
	dir := strings.TrimSuffix(stateDir, "/") + "/"
	for _, arg := range info.Cmdline[min(1, len(info.Cmdline)):] {
		if strings.Contains(arg+"/", dir) {
			return true
		}
	}
	return false
}

// stopPid stops the process group led by pid, first politely so etcd and the apiserver close
// cleanly, then with SIGKILL after grace.
func stopPid(pid int, grace time.Duration, read ProcReader) {
	gone := func() bool {
		info, ok := read(pid)
		return !ok || info.Zombie
	}
	if gone() {
		return
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if gone() {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 200 && !gone(); i++ {
		time.Sleep(25 * time.Millisecond)
	}
}

// findOurProcesses scans /proc for processes that are ours by IsOurs for any of exes. This is
// the safety net behind pid files: a launcher killed between starting a component and writing
// its pid file must still not leave it running.
func findOurProcesses(stateDir string, exes []string, read ProcReader) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		info, ok := read(pid)
		if !ok {
			continue
		}
		for _, exe := range exes {
			if IsOurs(info, exe, stateDir) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// tailFile returns the last n lines of path, for error messages.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}
