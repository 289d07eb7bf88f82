// Command testsummary reads `go test -json` on stdin and prints what `go test` would have
// printed without -json (an ok line per passing package, the output of failing tests and
// packages; everything with -v), then names every skipped test and why: a skip is a test that
// did not decide, and a run that skipped a test did not prove what it was written for.
//
// It exits 1 when a test or a build failed, and also when a test was skipped and CI=true. With
// -skips FILE it appends each skip to FILE (one line each), and -list FILE prints the skips a
// series of runs appended there, so `make test` ends with one list of all its parts' skips.
//
//	go test -json ./... | testsummary [-v] [-skips FILE]
//	testsummary -list FILE
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

func main() {
	verbose := flag.Bool("v", false, "print the whole output, as go test -v does")
	skipsFile := flag.String("skips", "", "append each skipped test to this file")
	list := flag.String("list", "", "print the skipped tests appended to this file by earlier runs (no stdin)")
	flag.Parse()
	ci := os.Getenv("CI") == "true"
	if *list != "" {
		os.Exit(listSkips(*list, os.Stdout, ci))
	}
	res, err := summarize(os.Stdin, os.Stdout, *verbose)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	writeSkips(os.Stdout, res.skips, "")
	if ci && len(res.skips) > 0 {
		fmt.Println("FAIL: CI=true, where a skipped test fails the run")
	}
	if *skipsFile != "" {
		if err := appendSkips(*skipsFile, res.skips); err != nil {
			fmt.Fprintln(os.Stderr, "testsummary:", err)
			os.Exit(2)
		}
	}
	os.Exit(res.exitCode(ci))
}

// event is one line of `go test -json` (cmd/test2json), build events included.
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output and build-fail
	Test       string
	Output     string
	// FailedBuild names the package whose build failed this package's test.
	FailedBuild string
}

// skip is one skipped test and the first line of its skip message.
type skip struct {
	Package, Test, Reason string
}

func (s skip) String() string {
	return fmt.Sprintf("%s: %s (%s)", s.Test, s.Reason, s.Package)
}

type result struct {
	failed int // failing packages, builds included
	skips  []skip
}

func (r result) exitCode(ci bool) int {
	if r.failed > 0 || (ci && len(r.skips) > 0) {
		return 1
	}
	return 0
}

// line is one output line of a package, kept until the package ends.
type line struct {
	test, text string
}

type pkgState struct {
	lines []line
	// status of each test seen: "run", or its final action (pass, fail, skip).
	status map[string]string
	order  []string
}

// summarize copies the run to w as go test would print it and returns its failures and skips.
// A line that is not JSON (go's own messages, a launcher's) is copied as it comes.
func summarize(r io.Reader, w io.Writer, verbose bool) (result, error) {
	var res result
	pkgs := map[string]*pkgState{}
	var open []string // packages in the order they started, for a run cut short
	state := func(name string) *pkgState {
		p := pkgs[name]
		if p == nil {
			p = &pkgState{status: map[string]string{}}
			pkgs[name] = p
			open = append(open, name)
		}
		return p
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		raw := sc.Bytes()
		var e event
		if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &e) != nil {
			fmt.Fprintf(w, "%s\n", raw)
			continue
		}
		switch e.Action {
		case "build-output":
			fmt.Fprint(w, e.Output)
		case "build-fail":
			// The package's own fail event follows and is counted there.
		case "output":
			if verbose {
				fmt.Fprint(w, e.Output)
			}
			p := state(e.Package)
			p.lines = append(p.lines, line{e.Test, e.Output})
		case "run":
			p := state(e.Package)
			if _, seen := p.status[e.Test]; !seen {
				p.order = append(p.order, e.Test)
			}
			p.status[e.Test] = "run"
		case "pass", "fail", "skip":
			p := state(e.Package)
			if e.Test != "" {
				if _, seen := p.status[e.Test]; !seen {
					p.order = append(p.order, e.Test)
				}
				p.status[e.Test] = e.Action
				continue
			}
			res.skips = append(res.skips, finishPackage(w, e.Package, p, e.Action == "fail", verbose)...)
			if e.Action == "fail" {
				res.failed++
			}
			delete(pkgs, e.Package)
		}
	}
	if err := sc.Err(); err != nil {
		return res, err
	}
	// A package without an end (go test killed) failed.
	for _, name := range open {
		if p := pkgs[name]; p != nil {
			res.skips = append(res.skips, finishPackage(w, name, p, true, verbose)...)
			fmt.Fprintf(w, "FAIL\t%s\t(no result: the run ended first)\n", name)
			res.failed++
		}
	}
	return res, nil
}

// finishPackage prints a finished package as go test would without -v (nothing more with -v,
// where every line went out as it came) and returns its skipped tests.
func finishPackage(w io.Writer, name string, p *pkgState, failed, verbose bool) []skip {
	if !verbose {
		if failed {
			for _, l := range p.lines {
				// A test still running when the package ended (a panic, a timeout) failed too.
				st := p.status[l.test]
				if l.test != "" && st != "fail" && st != "run" {
					continue
				}
				if l.test != "" && isFraming(l.text) {
					continue
				}
				fmt.Fprint(w, l.text)
			}
		} else {
			// Passing: only the package's result line ("ok ...", "? ... [no test files]").
			for _, l := range p.lines {
				if l.test == "" && (strings.HasPrefix(l.text, "ok ") || strings.HasPrefix(l.text, "?")) {
					fmt.Fprint(w, l.text)
				}
			}
		}
	}
	var skips []skip
	for _, t := range p.order {
		if p.status[t] == "skip" {
			skips = append(skips, skip{Package: name, Test: t, Reason: skipReason(p.lines, t)})
		}
	}
	return skips
}

// isFraming reports the lines test2json adds for -v that go test without -v never prints.
func isFraming(s string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// logLine is a t.Log/t.Skip line: indented "file.go:NN: message".
var logLine = regexp.MustCompile(`^\s+[^\s:]+\.go:\d+: (.*)$`)

// skipReason is the first line of the test's last log message before its "--- SKIP" line,
// which is t.Skip's message.
func skipReason(lines []line, test string) string {
	reason := ""
	for _, l := range lines {
		if l.test != test {
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(l.text), "--- SKIP") {
			break
		}
		if m := logLine.FindStringSubmatch(strings.TrimRight(l.text, "\n")); m != nil {
			reason = m[1]
		}
	}
	if reason == "" {
		return "(no message)"
	}
	return reason
}

// writeSkips prints the summary of skips; nothing when there is none.
func writeSkips(w io.Writer, skips []skip, what string) {
	if len(skips) == 0 {
		return
	}
	noun := "tests"
	if len(skips) == 1 {
		noun = "test"
	}
	fmt.Fprintf(w, "\nSKIPPED %d %s%s:\n", len(skips), noun, what)
	for _, s := range skips {
		fmt.Fprintf(w, "  %s\n", s)
	}
}

// appendSkips adds the skips to file, one "package<TAB>test<TAB>reason" line each.
func appendSkips(file string, skips []skip) error {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	for _, s := range skips {
		fmt.Fprintf(f, "%s\t%s\t%s\n", s.Package, s.Test, s.Reason)
	}
	return f.Close()
}

// readSkips reads what appendSkips wrote; a missing file is no skips.
func readSkips(r io.Reader) ([]skip, error) {
	var skips []skip
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), "\t", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("malformed skip line %q", sc.Text())
		}
		skips = append(skips, skip{Package: parts[0], Test: parts[1], Reason: parts[2]})
	}
	return skips, sc.Err()
}

// listSkips prints the skips in file and returns the exit code: 1 under CI with any skip.
func listSkips(file string, w io.Writer, ci bool) int {
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(w, "\nno test was skipped")
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		return 2
	}
	defer f.Close()
	skips, err := readSkips(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		return 2
	}
	if len(skips) == 0 {
		fmt.Fprintln(w, "\nno test was skipped")
		return 0
	}
	writeSkips(w, skips, " in all")
	if ci {
		fmt.Fprintln(w, "FAIL: CI=true, where a skipped test fails the run")
	}
	return result{skips: skips}.exitCode(ci)
}
