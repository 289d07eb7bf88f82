// Package triage answers "why is my job stuck?" and "why did it fail?". The analysis (Replicas,
// Analyze) is pure: it turns a snapshot of the Job, its pods, their events, the nodes that
// matter and the failing rank's last log lines into findings, so every rule is a table test.
// Collect is the only part that talks to the API server, and it does so in a bounded number of
// requests whatever the size of the job.
package triage

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobstatus"
)

// Snapshot is everything the analysis looks at, read at one moment.
type Snapshot struct {
	Job  *batchv1.Job
	Pods []corev1.Pod
	// Events are those about the Job and its pods (others are ignored anyway).
	Events []corev1.Event
	// Nodes holds the nodes Collect judged relevant, by name; a pod's node missing here is
	// either fine or was not looked at.
	Nodes map[string]*corev1.Node
	// TaintedNodes are the cluster's tainted nodes (name, labels, taints and allocatable only),
	// read only when a pod is unschedulable for an untolerated taint: the scheduler's message
	// no longer names the taint, and the fix (--toleration) needs it.
	TaintedNodes []corev1.Node
	// Logs are the last lines of the failing rank's training container, by pod name.
	Logs map[string][]string
	// Archive, when the Job failed and its pods are gone, is what its log archive in S3 says
	// (nil when it was not read).
	Archive *Archive
	// Workload is what Kueue says of a job waiting in its queue (read by the command through the
	// kueue engine; nil for any other job, or when it could not be read).
	Workload *jobstatus.Workload
	// Now is when the snapshot was taken: ages and "stuck terminating" are measured from it.
	Now time.Time
}

// Archive is the last lines of each rank's last attempt, read from the log archive of one run.
type Archive struct {
	// URL is where the archive was read, for the report.
	URL string `json:"url"`
	// UID is the run's: the UID its Job had.
	UID   string         `json:"uid"`
	Ranks []ArchivedRank `json:"ranks"`
}

// ArchivedRank is the last attempt of one rank, as archived.
type ArchivedRank struct {
	Rank int    `json:"rank"`
	Pod  string `json:"pod"`
	// Written is the archive's last write: about when the rank stopped.
	Written time.Time `json:"written"`
	Lines   []string  `json:"last_lines"`
}

// ArchiveEvidence, in an Analysis, says that its findings come from a log archive because no
// pod was left to read them from, or, JobGone, not even the Job.
type ArchiveEvidence struct {
	Archive
	// JobGone: the run's Job no longer exists (deleted, TTL'd, or its name reused by a newer
	// run): the archive is all the evidence, no Job, pod or event of the run is left.
	JobGone bool `json:"job_gone"`
	// FirstToStop is the rank whose archive was last written first, the likeliest to have
	// failed first; nil when no rank was archived.
	FirstToStop *int `json:"first_to_stop"`
}

// Issue is the SDK's readiness_issue: why a pod is not progressing.
type Issue struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Replica is one pod of the Job, in the SDK's get_job_replicas shape.
type Replica struct {
	Name   string        `json:"name"`
	Rank   int           `json:"rank"`
	Node   string        `json:"node"`
	Phase  string        `json:"phase"`
	Status ReplicaStatus `json:"status"`

	// Shown in the table, not part of the SDK's JSON.
	Ready    string `json:"-"`
	Restarts int32  `json:"-"`
}

// ReplicaStatus wraps the issue so that JSON reads status.readiness_issue, null when healthy.
type ReplicaStatus struct {
	ReadinessIssue *Issue `json:"readiness_issue"`
}

// The SDK's failure classes.
const (
	ErrProgram = "ERR_PROGRAM"
	ErrInfra   = "ERR_INFRA"
)

// NodeEvent is one finding of the failure analysis: something that happened to one rank.
type NodeEvent struct {
	NodeEventName string     `json:"node_event_name"`
	Node          string     `json:"node"`
	Pod           string     `json:"pod"`
	Rank          int        `json:"rank"`
	ExitCode      *int32     `json:"exit_code"`
	Message       string     `json:"message"`
	Time          *time.Time `json:"time"`
	// Beyond the SDK: each finding's own class and what to do about it.
	ErrClass   string `json:"err_class"`
	Suggestion string `json:"suggestion"`
}

// Analysis is the SDK's get_failure_analysis result, plus fields of our own.
type Analysis struct {
	// ErrClass is ERR_PROGRAM or ERR_INFRA, the class of the first failure; nil when no
	// issue was found.
	ErrClass              *string     `json:"err_class"`
	Suggestion            string      `json:"suggestion"`
	JobFailureByNodeEvent []NodeEvent `json:"job_failure_by_node_event"`

	// Beyond the SDK.
	Job       string `json:"job"`
	Namespace string `json:"namespace"`
	// Status is the Job's status as `kubectl tao status` reports it, Message its explanation.
	Status  string `json:"status"`
	Message string `json:"message"`
	// JobFailure is the Job's own Failed condition ("BackoffLimitExceeded: ..."), if any.
	JobFailure string `json:"job_failure,omitempty"`
	// FirstFailure is the earliest finding: where things went wrong first.
	FirstFailure *NodeEvent `json:"first_failure"`
	// FailedByRule is the pod failure policy rule (--retries) that failed the Job at once.
	FailedByRule *FiredRule `json:"failed_by_rule,omitempty"`
	// Notes are job-level observations, such as a partial start, or a pod whose eviction the
	// Job's pod failure policy ignored.
	Notes []string `json:"notes"`
	// Archive is the log archive the findings were read from when no pod was left; nil when
	// the analysis did not read one.
	Archive *ArchiveEvidence `json:"archive,omitempty"`
}
