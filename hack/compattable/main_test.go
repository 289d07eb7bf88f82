package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRender(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "1.28.json")
	report := `[
  {"minor": "v1.28.15", "feature": "submit", "result": "pass", "detail": ""},
  {"minor": "v1.28.15", "feature": "--retries", "result": "degraded", "detail": "Warning: the API server did not keep spec.backoffLimitPerIndex"},
  {"minor": "v1.28.15", "feature": "results", "result": "n/a", "detail": "needs the real node"}
]`
	if err := os.WriteFile(old, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	newer := filepath.Join(dir, "1.37.json")
	report = `[
  {"minor": "v1.37.2", "feature": "submit", "result": "fail", "detail": "submit: exit 6: a | b"},
  {"minor": "v1.37.2", "feature": "--retries", "result": "pass", "detail": ""},
  {"minor": "v1.37.2", "feature": "results", "result": "n/a", "detail": "needs the real node"}
]`
	if err := os.WriteFile(newer, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	render(&b, []release{load("v1.28.15", old), load("v1.33.13", filepath.Join(dir, "none.json")), load("v1.37.2", newer)})
	want := `| feature | v1.28.15 | v1.33.13 | v1.37.2 |
| --- | --- | --- | --- |
| submit | pass | no report [1] | fail [2] |
| --retries | degraded [3] | no report [1] | pass |
| results | n/a [4] | no report [1] | n/a [4] |

1. v1.33.13: no report (` + filepath.Join(dir, "none.json") + `): the run stopped before TestCompat wrote it; see the log beside it
2. fail: submit: exit 6: a \| b
3. degraded: Warning: the API server did not keep spec.backoffLimitPerIndex
4. n/a: needs the real node
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestRenderNoReportAtAll(t *testing.T) {
	var b strings.Builder
	render(&b, []release{load("v1.29.6", filepath.Join(t.TempDir(), "none.json"))})
	if got := b.String(); !strings.Contains(got, "| feature | v1.29.6 |") || !strings.Contains(got, "1. v1.29.6: no report") {
		t.Errorf("a release without a report must still be named with its reason:\n%s", got)
	}
}
