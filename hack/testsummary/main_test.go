package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Events as go1.27's `go test -json` writes them (Time and Elapsed left out).
const (
	passingPkg = `{"Action":"start","Package":"fix/a"}
{"Action":"run","Package":"fix/a","Test":"TestPass"}
{"Action":"output","Package":"fix/a","Test":"TestPass","Output":"=== RUN   TestPass\n"}
{"Action":"output","Package":"fix/a","Test":"TestPass","Output":"    a_test.go:3: chatty\n"}
{"Action":"output","Package":"fix/a","Test":"TestPass","Output":"--- PASS: TestPass (0.00s)\n"}
{"Action":"pass","Package":"fix/a","Test":"TestPass"}
{"Action":"run","Package":"fix/a","Test":"TestSkip"}
{"Action":"output","Package":"fix/a","Test":"TestSkip","Output":"=== RUN   TestSkip\n"}
{"Action":"output","Package":"fix/a","Test":"TestSkip","Output":"    a_test.go:4: before\n"}
{"Action":"output","Package":"fix/a","Test":"TestSkip","Output":"    a_test.go:4: real node: not root\n"}
{"Action":"output","Package":"fix/a","Test":"TestSkip","Output":"        second line\n"}
{"Action":"output","Package":"fix/a","Test":"TestSkip","Output":"--- SKIP: TestSkip (0.00s)\n"}
{"Action":"skip","Package":"fix/a","Test":"TestSkip"}
{"Action":"run","Package":"fix/a","Test":"TestSub"}
{"Action":"output","Package":"fix/a","Test":"TestSub","Output":"=== RUN   TestSub\n"}
{"Action":"run","Package":"fix/a","Test":"TestSub/one"}
{"Action":"output","Package":"fix/a","Test":"TestSub/one","Output":"=== RUN   TestSub/one\n"}
{"Action":"output","Package":"fix/a","Test":"TestSub/one","Output":"    a_test.go:6: no zstd\n"}
{"Action":"output","Package":"fix/a","Test":"TestSub/one","Output":"--- SKIP: TestSub/one (0.00s)\n"}
{"Action":"skip","Package":"fix/a","Test":"TestSub/one"}
{"Action":"output","Package":"fix/a","Test":"TestSub","Output":"--- PASS: TestSub (0.00s)\n"}
{"Action":"pass","Package":"fix/a","Test":"TestSub"}
{"Action":"output","Package":"fix/a","Output":"PASS\n"}
{"Action":"output","Package":"fix/a","Output":"ok  \tfix/a\t0.017s\n"}
{"Action":"pass","Package":"fix/a"}
`
	failingPkg = `{"Action":"start","Package":"fix/b"}
{"Action":"run","Package":"fix/b","Test":"TestOK"}
{"Action":"output","Package":"fix/b","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"fix/b","Test":"TestOK","Output":"    b_test.go:3: fine\n"}
{"Action":"output","Package":"fix/b","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"fix/b","Test":"TestOK"}
{"Action":"run","Package":"fix/b","Test":"TestBad"}
{"Action":"output","Package":"fix/b","Test":"TestBad","Output":"=== RUN   TestBad\n"}
{"Action":"output","Package":"fix/b","Test":"TestBad","Output":"    b_test.go:4: boom\n"}
{"Action":"output","Package":"fix/b","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"fix/b","Test":"TestBad"}
{"Action":"output","Package":"fix/b","Output":"FAIL\n"}
{"Action":"output","Package":"fix/b","Output":"FAIL\tfix/b\t0.029s\n"}
{"Action":"fail","Package":"fix/b"}
`
	buildFailure = `{"ImportPath":"fix/c [fix/c.test]","Action":"build-output","Output":"# fix/c [fix/c.test]\n"}
{"ImportPath":"fix/c [fix/c.test]","Action":"build-output","Output":"c/c_test.go:3:28: undefined: undefined\n"}
{"ImportPath":"fix/c [fix/c.test]","Action":"build-fail"}
{"Action":"start","Package":"fix/c"}
{"Action":"output","Package":"fix/c","Output":"FAIL\tfix/c [build failed]\n"}
{"Action":"fail","Package":"fix/c","FailedBuild":"fix/c [fix/c.test]"}
`
	noTests = `{"Action":"start","Package":"fix/d"}
{"Action":"output","Package":"fix/d","Output":"?   \tfix/d\t[no test files]\n"}
{"Action":"skip","Package":"fix/d"}
`
	// A test binary that panicked in a test: no fail event for the test itself.
	panicked = `{"Action":"start","Package":"fix/e"}
{"Action":"run","Package":"fix/e","Test":"TestHang"}
{"Action":"output","Package":"fix/e","Test":"TestHang","Output":"=== RUN   TestHang\n"}
{"Action":"output","Package":"fix/e","Test":"TestHang","Output":"panic: test timed out after 1s\n"}
{"Action":"output","Package":"fix/e","Output":"FAIL\tfix/e\t1.005s\n"}
{"Action":"fail","Package":"fix/e"}
`
	// go test killed before the package ended.
	cutShort = `{"Action":"start","Package":"fix/f"}
{"Action":"run","Package":"fix/f","Test":"TestLong"}
{"Action":"output","Package":"fix/f","Test":"TestLong","Output":"=== RUN   TestLong\n"}
{"Action":"output","Package":"fix/f","Test":"TestLong","Output":"    f_test.go:9: still going\n"}
`
)

func TestSummarize(t *testing.T) {
	passingSkips := []skip{
		{Package: "fix/a", Test: "TestSkip", Reason: "real node: not root"},
		{Package: "fix/a", Test: "TestSub/one", Reason: "no zstd"},
	}
	for _, tc := range []struct {
		name, in string
		verbose  bool
		want     string // the output, exactly
		failed   int
		skips    []skip
	}{
		{
			name: "passing package: its ok line only",
			in:   passingPkg, want: "ok  \tfix/a\t0.017s\n", skips: passingSkips,
		},
		{
			name: "verbose: every line as it came", verbose: true,
			in:    passingPkg,
			want:  "=== RUN   TestPass\n    a_test.go:3: chatty\n--- PASS: TestPass (0.00s)\n=== RUN   TestSkip\n    a_test.go:4: before\n    a_test.go:4: real node: not root\n        second line\n--- SKIP: TestSkip (0.00s)\n=== RUN   TestSub\n=== RUN   TestSub/one\n    a_test.go:6: no zstd\n--- SKIP: TestSub/one (0.00s)\n--- PASS: TestSub (0.00s)\nPASS\nok  \tfix/a\t0.017s\n",
			skips: passingSkips,
		},
		{
			name: "failing package: the failing test's output and the package's, not the passing test's",
			in:   failingPkg, failed: 1,
			want: "    b_test.go:4: boom\n--- FAIL: TestBad (0.00s)\nFAIL\nFAIL\tfix/b\t0.029s\n",
		},
		{
			name: "build failure: the compiler's output and the package's FAIL line",
			in:   buildFailure, failed: 1,
			want: "# fix/c [fix/c.test]\nc/c_test.go:3:28: undefined: undefined\nFAIL\tfix/c [build failed]\n",
		},
		{
			name: "package without tests: its line, not a skipped test",
			in:   noTests, want: "?   \tfix/d\t[no test files]\n",
		},
		{
			name: "a test still running when its package failed is shown",
			in:   panicked, failed: 1,
			want: "panic: test timed out after 1s\nFAIL\tfix/e\t1.005s\n",
		},
		{
			name: "a run cut short fails its open package",
			in:   cutShort, failed: 1,
			want: "    f_test.go:9: still going\nFAIL\tfix/f\t(no result: the run ended first)\n",
		},
		{
			name: "lines that are not JSON pass through",
			in:   "localcluster: up\n" + noTests, want: "localcluster: up\n?   \tfix/d\t[no test files]\n",
		},
		{
			name: "several packages",
			in:   passingPkg + failingPkg + noTests, failed: 1, skips: passingSkips,
			want: "ok  \tfix/a\t0.017s\n    b_test.go:4: boom\n--- FAIL: TestBad (0.00s)\nFAIL\nFAIL\tfix/b\t0.029s\n?   \tfix/d\t[no test files]\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			res, err := summarize(strings.NewReader(tc.in), &out, tc.verbose)
			if err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("output:\n%q\nwant:\n%q", out.String(), tc.want)
			}
			if res.failed != tc.failed {
				t.Errorf("failed = %d, want %d", res.failed, tc.failed)
			}
			if !reflect.DeepEqual(res.skips, tc.skips) {
				t.Errorf("skips = %v, want %v", res.skips, tc.skips)
			}
		})
	}
}

func TestSkipReason(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []line
		want  string
	}{
		{"the skip's first line", []line{{"T", "=== RUN   T\n"}, {"T", "    x_test.go:7: no kubectl on PATH\n"}, {"T", "        more\n"}, {"T", "--- SKIP: T (0.00s)\n"}}, "no kubectl on PATH"},
		{"the last message, not an earlier log", []line{{"T", "    x_test.go:5: setting up\n"}, {"T", "    x_test.go:7: not root\n"}, {"T", "--- SKIP: T (0.00s)\n"}}, "not root"},
		{"another test's lines do not count", []line{{"U", "    x_test.go:5: other\n"}, {"T", "--- SKIP: T (0.00s)\n"}}, "(no message)"},
		{"a message with a colon", []line{{"T", "    realnode_test.go:68: no real node: not root\n"}, {"T", "--- SKIP: T (0.00s)\n"}}, "no real node: not root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := skipReason(tc.lines, "T"); got != tc.want {
				t.Errorf("skipReason = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	one := []skip{{Package: "p", Test: "T", Reason: "r"}}
	for _, tc := range []struct {
		name string
		res  result
		ci   bool
		want int
	}{
		{"all passed", result{}, false, 0},
		{"all passed under CI", result{}, true, 0},
		{"a failure", result{failed: 1}, false, 1},
		{"a skip outside CI", result{skips: one}, false, 0},
		{"a skip under CI", result{skips: one}, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.res.exitCode(tc.ci); got != tc.want {
				t.Errorf("exitCode(ci=%v) = %d, want %d", tc.ci, got, tc.want)
			}
		})
	}
}

// TestSkipsFile checks that runs appending to one file are listed together, in order.
func TestSkipsFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "skips")
	var out bytes.Buffer
	if code := listSkips(file, &out, true); code != 0 || !strings.Contains(out.String(), "no test was skipped") {
		t.Fatalf("no file: code %d, output %q", code, out.String())
	}
	first := []skip{{Package: "p/unit", Test: "TestZstd", Reason: "the zstd command is not installed"}}
	second := []skip{{Package: "p/e2e", Test: "TestRealNodeTorchrun", Reason: "no real node: not root"}}
	for _, s := range [][]skip{first, second} {
		if err := appendSkips(file, s); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := readSkips(f)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(append([]skip{}, first...), second...); !reflect.DeepEqual(got, want) {
		t.Fatalf("read back %v, want %v", got, want)
	}
	out.Reset()
	if code := listSkips(file, &out, false); code != 0 {
		t.Errorf("outside CI: code %d, want 0", code)
	}
	want := "\nSKIPPED 2 tests in all:\n  TestZstd: the zstd command is not installed (p/unit)\n  TestRealNodeTorchrun: no real node: not root (p/e2e)\n"
	if out.String() != want {
		t.Errorf("list:\n%q\nwant:\n%q", out.String(), want)
	}
	out.Reset()
	if code := listSkips(file, &out, true); code != 1 {
		t.Errorf("under CI: code %d, want 1", code)
	}
}
