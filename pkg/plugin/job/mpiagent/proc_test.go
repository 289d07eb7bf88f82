//go:build unix

package mpiagent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The test binary runs ExecProcess in a child of its own, since the call replaces the process.
func TestMain(m *testing.M) {
	if argv := os.Getenv("MPIAGENT_EXEC_PROCESS"); argv != "" {
		toPodLog := os.Getenv("MPIAGENT_TO_POD_LOG") == "1"
		logs := [2]string{os.Getenv("MPIAGENT_LOG_OUT"), os.Getenv("MPIAGENT_LOG_ERR")}
		err := ExecProcess(strings.Split(argv, "\x1f"), toPodLog, logs)
		os.Stderr.WriteString("ExecProcess: " + err.Error() + "\n")
		os.Exit(99)
	}
	os.Exit(m.Run())
}

// execProcess runs ExecProcess(argv) in a child and returns the child's own stdout and stderr.
func execProcess(t *testing.T, argv []string, toPodLog bool, logs [2]string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	pod := "0"
	if toPodLog {
		pod = "1"
	}
	cmd.Env = append(os.Environ(), "MPIAGENT_EXEC_PROCESS="+strings.Join(argv, "\x1f"), "MPIAGENT_TO_POD_LOG="+pod,
		"MPIAGENT_LOG_OUT="+logs[0], "MPIAGENT_LOG_ERR="+logs[1])
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

func TestExecProcess(t *testing.T) {
	script := []string{"sh", "-c", `echo "out $$"; echo "err $$" >&2; exit 7`}
	t.Run("to the pod's log", func(t *testing.T) {
		dir := t.TempDir()
		logs := [2]string{filepath.Join(dir, "1"), filepath.Join(dir, "2")}
		for _, f := range logs {
			if err := os.WriteFile(f, []byte("before\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		out, errOut, code := execProcess(t, script, true, logs)
		if out != "" || errOut != "" || code != 7 {
			t.Errorf("the daemon's pipes got %q and %q, exit %d: want nothing there and the command's 7", out, errOut, code)
		}
		for i, want := range []string{"out ", "err "} {
			b, _ := os.ReadFile(logs[i])
			if !strings.HasPrefix(string(b), "before\n"+want) {
				t.Errorf("%s: %q, want %q appended", logs[i], b, want)
			}
		}
	})
	t.Run("rank 0 keeps its streams", func(t *testing.T) {
		out, errOut, code := execProcess(t, script, false, [2]string{})
		if !strings.HasPrefix(out, "out ") || !strings.HasPrefix(errOut, "err ") || code != 7 {
			t.Errorf("stdout %q, stderr %q, exit %d", out, errOut, code)
		}
	})
	t.Run("a log that does not open", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "no", "such")
		out, errOut, _ := execProcess(t, script, true, [2]string{missing, missing})
		if !strings.HasPrefix(out, "out ") || !strings.HasPrefix(errOut, "err ") {
			t.Errorf("stdout %q, stderr %q: want the streams left to the daemon", out, errOut)
		}
	})
	t.Run("the same process", func(t *testing.T) {
		// $$ of the shell is the PID the daemon started: the agent execs, it does not fork.
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "MPIAGENT_EXEC_PROCESS="+strings.Join([]string{"sh", "-c", "echo $$"}, "\x1f"))
		var out strings.Builder
		cmd.Stdout = &out
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(out.String()); got != strconv.Itoa(cmd.Process.Pid) {
			t.Errorf("the command ran as PID %s, the child was %d", got, cmd.Process.Pid)
		}
	})
	t.Run("not found", func(t *testing.T) {
		_, errOut, code := execProcess(t, []string{"no-such-program-here"}, false, [2]string{})
		if code != 99 || !strings.Contains(errOut, `exec: "no-such-program-here": executable file not found`) {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})
}
