package jobstatus

import (
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// Summary is the one-line summary of a training job that `status` prints, and `wait -o` at the
// end (cmdutil.PrintSummary prints it). Its keys are a contract with users' scripts: every key
// is always present (null or 0 when unknown), in this order; add none without a reason.
type Summary struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
	Status    Status `json:"status"`
	Reason    Reason `json:"reason"`
	Message   string `json:"message"`
	GPUs      int64  `json:"gpus"`
	Nodes     int32  `json:"nodes"`
	// NodesRange is an elastic job's MIN:MAX (--nodes MIN:MAX), which `scale` resizes it within;
	// null for a job of fixed size.
	NodesRange     *string      `json:"nodesRange"`
	Active         int32        `json:"active"`
	Ready          int32        `json:"ready"`
	Succeeded      int32        `json:"succeeded"`
	Failed         int32        `json:"failed"`
	StartTime      *metav1.Time `json:"startTime"`
	CompletionTime *metav1.Time `json:"completionTime"`
	// WorkdirSHA256 is the checksum of the --workdir snapshot the job runs (null without one),
	// so that a user knows which code a run used.
	WorkdirSHA256 *string `json:"workdirSHA256"`
	// Queue is where a job waiting in a Kueue queue waits and the quota it waits for (null for
	// any other job, or when Kueue's objects could not be read).
	Queue *QueueState `json:"queue"`
	// LastCheckpoint is the checkpoint a new attempt would resume from, for a job with
	// --checkpoint-dir when the S3 credentials were at hand; absent otherwise.
	LastCheckpoint *CheckpointState `json:"lastCheckpoint,omitempty"`

	// created is for AGE in the table, position for its STATUS (Queue carries it in the
	// JSON); not part of the JSON contract.
	created  time.Time
	position *Position
}

// CheckpointState is a kept checkpoint unit as status shows it: the file or directory below the
// checkpoint directory, its layout, its files and size, when it was written and how long ago.
type CheckpointState struct {
	Path string `json:"path"`
	// Layout is the framework's (s3layout.Layout): file, huggingface, deepspeed, ...
	Layout string `json:"layout,omitempty"`
	// Files and Size count every rank's files of the unit.
	Files      int       `json:"files,omitempty"`
	Size       int64     `json:"size"`
	Written    time.Time `json:"written"`
	AgeSeconds int64     `json:"ageSeconds"`
}

// Summarize turns a Job, its pods (nil when not listed) and, for a job waiting in a Kueue
// queue, its Workload (nil when none or not read) into a Summary. now tells a submit still
// running from one that never finished (WithSubmit). A nil job is the Unknown
// summary of namespace/name.
func Summarize(namespace, name string, job *batchv1.Job, pods []corev1.Pod, wl *Workload, now time.Time) Summary {
	r := Of(job, pods)
	if job != nil {
		r = WithSubmit(WithWorkload(r, job, wl), job, now)
	}
	s := Summary{Name: name, Namespace: namespace, Status: r.Status, Reason: r.Reason, Message: r.Message}
	if job == nil {
		s.Message = fmt.Sprintf("job.batch %q not found in namespace %q", name, namespace)
		return s
	}
	s.Name, s.Namespace, s.UID = job.Name, job.Namespace, string(job.UID)
	s.GPUs, s.Nodes = GPUsPerNode(job), Nodes(job)
	if r.Range != "" {
		s.NodesRange = &r.Range
	}
	s.Active, s.Succeeded, s.Failed = job.Status.Active, job.Status.Succeeded, job.Status.Failed
	// "ready" is what is really up: pods in phase Running when they were listed, otherwise the
	// Job's own ready counter.
	s.Ready = r.Running
	s.StartTime, s.CompletionTime = job.Status.StartTime, job.Status.CompletionTime
	s.created, s.position = job.CreationTimestamp.Time, r.Position
	if r.Reason != "" && wl != nil {
		s.Queue = wl.Queue
	}
	if sum, ok := job.Annotations[s3layout.AnnotationWorkdirSHA256]; ok {
		s.WorkdirSHA256 = &sum
	}
	return s
}

// Created is when the Job was created, for the AGE column.
func (s Summary) Created() time.Time { return s.created }

// Shown is the status as the STATUS column shows it (with the queue position of a queued job).
func (s Summary) Shown() string {
	return Result{Status: s.Status, Reason: s.Reason, Position: s.position}.Shown()
}
