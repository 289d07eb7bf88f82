package tail

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// dirFiles reads every file of dir, names to contents.
func dirFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

func TestSaveFilesSplitsRanks(t *testing.T) {
	for _, inPlace := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "logs")
		s, err := CreateSaveFiles(dir, 0, inPlace)
		if err != nil {
			t.Fatal(err)
		}
		// What Logs writes: whole lines, several per Write, the text after the prefix
		// whatever it holds (even something that looks like a prefix).
		for _, w := range []string{"[rank 0] a\n[rank 0] [rank 1] b\n", "[rank 10] c\n", "[rank 0] \n[rank 10] d (cut\n"} {
			if n, err := s.Write([]byte(w)); err != nil || n != len(w) {
				t.Fatalf("Write(%q) = %d, %v", w, n, err)
			}
		}
		if !inPlace {
			// Nothing under its name before Close: only temporary files.
			for name := range dirFiles(t, dir) {
				if !strings.HasPrefix(name, ".") {
					t.Errorf("%s written before Close", name)
				}
			}
		}
		summary, err := s.Close(nil)
		want := map[string]string{"rank-0.log": "a\n[rank 1] b\n\n", "rank-10.log": "c\nd (cut\n"}
		if got := dirFiles(t, dir); err != nil || !maps.Equal(got, want) {
			t.Errorf("in place %v: %q, %v; want %q", inPlace, got, err, want)
		}
		if summary != "Saved 5 lines of 2 ranks in "+dir+" (rank-<N>.log)." {
			t.Errorf("summary %q", summary)
		}
	}
}

// A read that fails leaves nothing: no half-written file, an earlier save's file untouched, and
// no directory the save made.
func TestSaveFilesFailedReadLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rank-0.log"), []byte("earlier save\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := CreateSaveFiles(dir, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = s.Write([]byte("[rank 0] new\n[rank 1] new\n"))
	if summary, err := s.Close(errors.New("reading the log of rank 2: boom")); err != nil || summary != "" {
		t.Errorf("Close = %q, %v", summary, err)
	}
	if got := dirFiles(t, dir); !maps.Equal(got, map[string]string{"rank-0.log": "earlier save\n"}) {
		t.Errorf("left %q", got)
	}

	made := filepath.Join(t.TempDir(), "new")
	s, err = CreateSaveFiles(made, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = s.Write([]byte("[rank 0] new\n"))
	_, _ = s.Close(errors.New("boom"))
	if _, err := os.Stat(made); !os.IsNotExist(err) {
		t.Errorf("the directory the save made is still there: %v", err)
	}

	// Following, the files are written as lines come and kept whatever ends the follow.
	dir = t.TempDir()
	s, _ = CreateSaveFiles(dir, 2, true)
	_, _ = s.Write([]byte("[rank 3] followed\n"))
	if got := dirFiles(t, dir); !maps.Equal(got, map[string]string{"rank-3.attempt-2.log": "followed\n"}) {
		t.Errorf("while following: %q", got)
	}
	if summary, err := s.Close(errors.New("interrupted")); err != nil || !strings.Contains(summary, "rank-<N>.attempt-2.log") {
		t.Errorf("Close = %q, %v", summary, err)
	}
	if got := dirFiles(t, dir); !maps.Equal(got, map[string]string{"rank-3.attempt-2.log": "followed\n"}) {
		t.Errorf("after following: %q", got)
	}
}

func TestSaveDirRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckSaveDir(file); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("CheckSaveDir(file) = %v", err)
	}
	if err := CheckSaveDir(""); err == nil {
		t.Error("CheckSaveDir(\"\") accepted")
	}
	// Under a file: the directory cannot be made (permissions would not stop root, this does).
	if _, err := CreateSaveFiles(filepath.Join(file, "sub"), 0, false); err == nil {
		t.Error("CreateSaveFiles under a file succeeded")
	}
	if b, _ := os.ReadFile(file); string(b) != "x" {
		t.Errorf("the file became %q", b)
	}
	s, _ := CreateSaveFiles(t.TempDir(), 0, false)
	if _, err := s.Write([]byte("no prefix\n")); err == nil {
		t.Error("a line without its rank was taken")
	}
}

func TestSaveFileName(t *testing.T) {
	got := []string{SaveFileName(0, 0), SaveFileName(12, 0), SaveFileName(3, 1), SaveFileName(3, 20)}
	if want := []string{"rank-0.log", "rank-12.log", "rank-3.attempt-1.log", "rank-3.attempt-20.log"}; !slices.Equal(got, want) {
		t.Errorf("%q, want %q", got, want)
	}
}
