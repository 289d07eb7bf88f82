package jobresults

import (
	"strings"
	"testing"
	"time"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/s3"
)

func TestRunsAndPickRun(t *testing.T) {
	at := func(m int) time.Time { return time.Date(2026, 1, 1, 0, m, 0, 0, time.UTC) }
	runs := Runs("results/train/", []s3.Object{
		{Key: "results/train/new/a", Size: 1, LastModified: at(5)},
		{Key: "results/train/old/a", Size: 2, LastModified: at(1)},
		{Key: "results/train/old/b/c", Size: 3, LastModified: at(2)},
		{Key: "results/train/stray", Size: 100, LastModified: at(9)}, // in no run
	})
	if len(runs) != 2 || runs[0] != (Run{UID: "old", Objects: 2, Bytes: 5, LastModified: at(2)}) || runs[1] != (Run{UID: "new", Objects: 1, Bytes: 1, LastModified: at(5)}) {
		t.Fatalf("Runs = %+v", runs)
	}
	if uid, err := PickRun("train", "s3://b/results/train/", runs[1:]); uid != "new" || err != nil {
		t.Errorf("one run: %q, %v", uid, err)
	}
	if _, err := PickRun("train", "s3://b/results/train/", nil); exitcode.Of(err) != exitcode.NotFound {
		t.Errorf("no run: %v", err)
	}
	_, err := PickRun("train", "s3://b/results/train/", runs)
	if exitcode.Of(err) != exitcode.Usage || !strings.Contains(err.Error(), "--uid old  (2 objects, 5 B, last written 2026-01-01T00:02:00Z)\n  --uid new") {
		t.Errorf("two runs: %v", err)
	}
}
