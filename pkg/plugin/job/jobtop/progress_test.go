package jobtop

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProgressScript runs what top execs in rank 0 with this machine's shell: with coreutils,
// and with only python3 on PATH (a Python image built from packages), the same bytes come out.
func TestProgressScript(t *testing.T) {
	// The system's interpreter: a python3 earlier on PATH may be a shim that needs a shell.
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("the test needs %s: %v", python, err)
	}
	root := t.TempDir()
	write := func(path string, data []byte, age time.Duration) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-age)
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	line := `{"epoch": 3, "max_epoch": 10, "status": "RUNNING"}` + "\n"
	big := bytes.Repeat([]byte(line), 2*progressTail/len(line))
	write(filepath.Join(root, "results", "status.json"), []byte("old\n"), time.Hour)
	write(filepath.Join(root, "results", "train", "status.json"), big, time.Minute)
	write(filepath.Join(root, "file.json"), []byte(line), 0)

	onlyPython := t.TempDir()
	if err := os.Symlink(python, filepath.Join(onlyPython, "python3")); err != nil {
		t.Fatal(err)
	}
	run := func(path, spec string) []byte {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", progressScript, "sh", spec, progressPython)
		cmd.Env = []string{"PATH=" + path}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("PATH=%s %s: %v", path, spec, err)
		}
		return out
	}
	for _, tc := range []struct {
		spec string
		want []byte
	}{
		// The newest status.json, one level below: its size, then its last progressTail bytes.
		{filepath.Join(root, "results") + "/", append([]byte(strconv.Itoa(len(big))+"\n"), big[len(big)-progressTail:]...)},
		{filepath.Join(root, "file.json"), []byte(strconv.Itoa(len(line)) + "\n" + line)},
		{filepath.Join(root, "missing.json"), nil},
		{filepath.Join(root, "none") + "/", nil},
	} {
		for _, path := range []string{os.Getenv("PATH"), onlyPython} {
			if got := run(path, tc.spec); !bytes.Equal(got, tc.want) {
				t.Errorf("PATH=%s %s: %d bytes %q..., want %d bytes %q...", path, tc.spec, len(got), head(got), len(tc.want), head(tc.want))
			}
		}
	}
	// Neither coreutils nor python3: nothing, and no error.
	if got := run(t.TempDir(), filepath.Join(root, "file.json")); len(got) != 0 {
		t.Errorf("without coreutils or python3: %q", got)
	}
	if p := parseProgressOutput(run(onlyPython, filepath.Join(root, "results")+"/")); p == nil {
		t.Error("what python3 printed does not parse")
	}
}

func head(b []byte) string { return strings.SplitN(string(b), "\n", 2)[0] }
