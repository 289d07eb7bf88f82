package triage

import (
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

func TestCheckpointNote(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	kept := KeptCheckpoint{Dir: "/ckpt", Path: "step-9.pt", Written: now.Add(-2 * time.Minute)}
	job := fixture.Job("ddp").Obj()
	suspended := fixture.Job("ddp").Obj()
	suspended.Spec.Suspend = ptr.To(true)
	for _, tc := range []struct {
		name   string
		status string
		job    bool
		kept   KeptCheckpoint
		want   string
	}{
		{"failed", "Error", false, kept, "the newest complete one is step-9.pt (written 2m0s ago); `kubectl tao submit NEW ... --checkpoint-dir /ckpt --resume-from ddp`"},
		{"failed, none read", "Error", false, KeptCheckpoint{Dir: "/ckpt"}, "none could be read (none kept yet, or no S3 credentials at hand): a new run would start from step 0"},
		{"preempted", "Pending", true, kept, "when it runs again, every rank resumes from step-9.pt (written 2m0s ago)"},
		{"a unit described", "Error", false, KeptCheckpoint{Dir: "/ckpt", Path: "checkpoint-4", Detail: "huggingface, 5 files, 1.1 GiB", Written: now.Add(-time.Minute)},
			"the newest complete one is checkpoint-4 (huggingface, 5 files, 1.1 GiB, written 1m0s ago);"},
		{"running", "Running", false, kept, ""},
		{"complete", "Complete", false, kept, ""},
	} {
		j := job
		if tc.job {
			j = suspended
		}
		got := CheckpointNote(j, tc.status, tc.kept, now)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
