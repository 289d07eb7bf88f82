// Command vulngate reads `govulncheck -format json` on stdin and fails (exit 1) when our code
// calls a vulnerable function of a module we require. Vulnerabilities in the Go standard
// library are reported as warnings only: they are fixed by the Go toolchain that builds the
// release, not by this repository's go.mod, and must not fail every CI run between a Go
// security release and the machine's upgrade.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
)

type finding struct {
	OSV          string `json:"osv"`
	FixedVersion string `json:"fixed_version"`
	Trace        []struct {
		Module   string `json:"module"`
		Version  string `json:"version"`
		Package  string `json:"package"`
		Function string `json:"function"`
	} `json:"trace"`
}

func main() {
	dec := json.NewDecoder(os.Stdin)
	called := map[string]finding{}
	for {
		var msg struct {
			Finding *finding `json:"finding"`
		}
		if err := dec.Decode(&msg); err == io.EOF {
			break
		} else if err != nil {
			fmt.Fprintln(os.Stderr, "vulngate: reading govulncheck output:", err)
			os.Exit(2)
		}
		// Only symbol-level findings (a function of ours reaches the vulnerable one) count.
		if f := msg.Finding; f != nil && len(f.Trace) > 0 && f.Trace[0].Function != "" {
			called[f.OSV] = *f
		}
	}
	ids := make([]string, 0, len(called))
	for id := range called {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	failed := 0
	for _, id := range ids {
		f := called[id]
		t := f.Trace[0]
		kind := "error"
		if t.Module == "stdlib" {
			kind = "warning (Go standard library: upgrade the Go toolchain)"
		} else {
			failed++
		}
		fmt.Printf("%s: %s in %s@%s (%s.%s), fixed in %s\n", kind, id, t.Module, t.Version, t.Package, t.Function, f.FixedVersion)
	}
	if failed > 0 {
		fmt.Printf("vulngate: our code calls %d vulnerable function(s) in required modules: upgrade them\n", failed)
		os.Exit(1)
	}
	fmt.Printf("vulngate: no called vulnerabilities in required modules (%d in the standard library)\n", len(ids)-failed)
}
