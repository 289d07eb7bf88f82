// Package golden compares test output with files checked into the repository, and rewrites
// them when the tests run with -update. It is the one golden helper and holds the one -update
// flag of the module's tests (a second flag of that name in a test binary would panic), so
// `go test ./... -update` regenerates every golden file, reviewed in the diff before a commit.
//
// It imports nothing of the plugin, so that in-package tests of any package may use it.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files instead of comparing with them")

// Updating reports whether the tests run with -update.
func Updating() bool { return *update }

// Check compares got with testdata/name of the test's package; with -update it writes got
// there instead.
func Check(t testing.TB, name, got string) {
	t.Helper()
	File(t, filepath.Join("testdata", name), got)
}

// File compares got with the file at path; with -update it writes got there instead.
func File(t testing.TB, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("output differs from %s (go test -update rewrites it) (-want +got):\n%s", path, diff)
	}
}

// Dir compares the files of dir whose names end in ext with got (file name to content): the
// same names, the same contents. With -update it makes dir hold exactly got, removing the
// files of that extension got lacks.
func Dir(t testing.TB, dir, ext string, got map[string]string) {
	t.Helper()
	want := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ext) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		want[e.Name()] = string(b)
	}
	if *update {
		for name := range want {
			if _, ok := got[name]; !ok {
				if err := os.Remove(filepath.Join(dir, name)); err != nil {
					t.Fatal(err)
				}
			}
		}
		for name, content := range got {
			File(t, filepath.Join(dir, name), content)
		}
		return
	}
	var stale []string
	for name, content := range got {
		if want[name] != content {
			stale = append(stale, name)
		}
	}
	for name := range want {
		if _, ok := got[name]; !ok {
			stale = append(stale, name+" (not generated)")
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Fatalf("%s is out of date (%s); go test -update rewrites it", dir, strings.Join(stale, ", "))
	}
}
