// Command compattable turns the reports TestCompat writes (COMPAT_REPORT, one per Kubernetes
// release) into the markdown table of docs/compat.md: a row per feature, a column per release,
// each cell pass, degraded, fail or n/a, with the warning or the reason in a numbered note
// below, so that the table stays narrow enough to read.
//
//	compattable [-o FILE] RELEASE=REPORT.json...
//
// A release whose report is missing or unreadable (its cluster did not come up, its build
// failed) gets a column of "no report" and a note naming the file, rather than no column.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

type row struct {
	Minor   string `json:"minor"`
	Feature string `json:"feature"`
	Result  string `json:"result"`
	Detail  string `json:"detail"`
}

// release is one column: the release asked for, and its report's rows or why there are none.
type release struct {
	name    string
	rows    []row
	missing string
}

func main() {
	out := flag.String("o", "", "also write the table to this file")
	flag.Parse()
	var releases []release
	for _, arg := range flag.Args() {
		name, path, ok := strings.Cut(arg, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "compattable: %q is not RELEASE=REPORT.json\n", arg)
			os.Exit(2)
		}
		releases = append(releases, load(name, path))
	}
	var b strings.Builder
	render(&b, releases)
	fmt.Print(b.String())
	if *out != "" {
		if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "compattable:", err)
			os.Exit(1)
		}
	}
}

func load(name, path string) release {
	data, err := os.ReadFile(path)
	if err != nil {
		return release{name: name, missing: fmt.Sprintf("no report (%s): the run stopped before TestCompat wrote it; see the log beside it", path)}
	}
	var rows []row
	if err := json.Unmarshal(data, &rows); err != nil {
		return release{name: name, missing: fmt.Sprintf("unreadable report %s: %v", path, err)}
	}
	return release{name: name, rows: rows}
}

// render writes the table and its notes. Features are in the order the reports first name
// them (TestCompat's order); one note serves every cell with the same result and words.
func render(w io.Writer, releases []release) {
	var features []string
	cells := map[[2]string]row{}
	for _, r := range releases {
		for _, x := range r.rows {
			key := [2]string{r.name, x.Feature}
			if _, seen := cells[key]; seen {
				continue
			}
			cells[key] = x
			if !contains(features, x.Feature) {
				features = append(features, x.Feature)
			}
		}
	}
	var notes []string
	note := func(text string) int {
		for i, n := range notes {
			if n == text {
				return i + 1
			}
		}
		notes = append(notes, text)
		return len(notes)
	}
	fmt.Fprint(w, "| feature |")
	for _, r := range releases {
		fmt.Fprintf(w, " %s |", r.name)
	}
	fmt.Fprint(w, "\n| --- |")
	for range releases {
		fmt.Fprint(w, " --- |")
	}
	fmt.Fprintln(w)
	for _, f := range features {
		fmt.Fprintf(w, "| %s |", escape(f))
		for _, r := range releases {
			x, ok := cells[[2]string{r.name, f}]
			switch {
			case r.missing != "":
				fmt.Fprintf(w, " no report [%d] |", note(r.name+": "+r.missing))
			case !ok:
				fmt.Fprint(w, " not in the report |")
			case x.Detail == "":
				fmt.Fprintf(w, " %s |", x.Result)
			default:
				fmt.Fprintf(w, " %s [%d] |", x.Result, note(x.Result+": "+x.Detail))
			}
		}
		fmt.Fprintln(w)
	}
	if len(features) == 0 {
		for _, r := range releases {
			if r.missing != "" {
				note(r.name + ": " + r.missing)
			}
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
	}
	for i, n := range notes {
		fmt.Fprintf(w, "%d. %s\n", i+1, escape(n))
	}
}

// escape keeps a warning's own "|" from ending a table cell.
func escape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
