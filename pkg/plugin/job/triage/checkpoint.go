package triage

import (
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
)

// KeptCheckpoint is what a run of a job with --checkpoint-dir kept, as CheckpointNote needs
// it: Path is "" when none could be read.
type KeptCheckpoint struct {
	// Dir is the job's --checkpoint-dir; OnVolume when a --volume holds it (nothing in S3).
	Dir      string
	OnVolume bool
	Path     string
	// Detail says what the unit is, as the caller words it ("huggingface, 5 files, 1.1 GiB").
	Detail  string
	Written time.Time
}

// NeedsCheckpointNote reports whether a job with --checkpoint-dir is one CheckpointNote speaks
// of: failed, or waiting to run again (Kueue preempted it, or has not admitted it yet).
func NeedsCheckpointNote(job *batchv1.Job, status string) bool {
	suspended := job.Spec.Suspend != nil && *job.Spec.Suspend
	return status == string(jobstatus.Error) || suspended
}

// CheckpointNote says, for a job NeedsCheckpointNote speaks of, where it would go on from and
// how; "" for any other job.
func CheckpointNote(job *batchv1.Job, status string, kept KeptCheckpoint, now time.Time) string {
	if !NeedsCheckpointNote(job, status) {
		return ""
	}
	if kept.OnVolume {
		return fmt.Sprintf("the job keeps its checkpoints on the volume at %s: a new attempt, or a new run with the same --volume "+
			"and --checkpoint-dir, resumes from the newest complete one there", kept.Dir)
	}
	if kept.Path == "" {
		return fmt.Sprintf("the job keeps checkpoints in %s, but none could be read (none kept yet, or no S3 credentials at hand): "+
			"a new run would start from step 0", kept.Dir)
	}
	ago := now.Sub(kept.Written).Round(time.Second)
	written := fmt.Sprintf("written %s ago", ago)
	if kept.Detail != "" {
		written = kept.Detail + ", " + written
	}
	if status == string(jobstatus.Error) {
		return fmt.Sprintf("the run kept checkpoints: the newest complete one is %s (%s); "+
			"`kubectl tao submit NEW ... --checkpoint-dir %s --resume-from %s` starts a new run from it", kept.Path, written, kept.Dir, job.Name)
	}
	return fmt.Sprintf("the job is suspended (waiting for Kueue to admit it, or preempted): when it runs again, every rank resumes "+
		"from %s (%s)", kept.Path, written)
}
