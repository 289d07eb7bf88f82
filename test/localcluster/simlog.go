package localcluster

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Pod annotations that choose a simulated pod's fate and its logs. The names are an interface:
// tests, the plugin's e2e suite and the demo depend on them.
const (
	AnnotationPrefix      = "sim.kubectl-tao.dev/"
	AnnotationFate        = AnnotationPrefix + "fate"
	AnnotationExitCode    = AnnotationPrefix + "exit-code"
	AnnotationRunDuration = AnnotationPrefix + "run-duration"
	AnnotationStartDelay  = AnnotationPrefix + "start-delay"
	AnnotationLogLines    = AnnotationPrefix + "log-lines"
	AnnotationLogInterval = AnnotationPrefix + "log-interval"
	// LabelEvict, put on a running pod, has kwok evict it at once (Failed, reason Evicted,
	// DisruptionTarget). A label, so that replacements made from the template lack it.
	LabelEvict = AnnotationPrefix + "evict"
	// LabelCrash=<exit code>, put on a running pod, has kwok end it at once with that code, as
	// a rank whose peer was lost dies of an NCCL or rendezvous error.
	LabelCrash = AnnotationPrefix + "crash"

	// CompletionIndexAnnotation is set by the job controller on pods of Indexed Jobs.
	CompletionIndexAnnotation = "batch.kubernetes.io/job-completion-index"
)

// Fates, the values of AnnotationFate.
const (
	FateSucceed          = "succeed"
	FateOOM              = "oom"
	FateExit             = "exit"
	FateImagePullBackOff = "image-pull-backoff"
	FateRunForever       = "run-forever"
)

// Defaults of the log annotations.
const (
	DefaultLogLines    = 10
	DefaultLogInterval = time.Duration(0)
)

// LogSpec is what a pod's simulated container writes: the lines "rank <Rank> step <k>" for
// k = 1..Lines, the first when the container starts and one more every Interval (all at once
// when Interval is 0).
type LogSpec struct {
	Rank     int
	Lines    int
	Interval time.Duration
}

// LogSpecFor reads a pod's log annotations. A malformed value falls back to the default and is
// reported, so one typo in a test does not silence a pod's logs.
func LogSpecFor(pod *corev1.Pod) (LogSpec, []error) {
	spec := LogSpec{Lines: DefaultLogLines, Interval: DefaultLogInterval}
	var errs []error
	ann := pod.Annotations
	if v, ok := ann[CompletionIndexAnnotation]; ok {
		if r, err := strconv.Atoi(v); err == nil && r >= 0 {
			spec.Rank = r
		} else {
			errs = append(errs, fmt.Errorf("annotation %s=%q: not a completion index", CompletionIndexAnnotation, v))
		}
	} else if v, ok := pod.Labels[CompletionIndexAnnotation]; ok {
		if r, err := strconv.Atoi(v); err == nil && r >= 0 {
			spec.Rank = r
		}
	}
	if v, ok := ann[AnnotationLogLines]; ok {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			spec.Lines = n
		} else {
			errs = append(errs, fmt.Errorf("annotation %s=%q: want a non-negative integer; using %d", AnnotationLogLines, v, DefaultLogLines))
		}
	}
	if v, ok := ann[AnnotationLogInterval]; ok {
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			spec.Interval = d
		} else {
			errs = append(errs, fmt.Errorf("annotation %s=%q: want a Go duration such as 500ms; using %s", AnnotationLogInterval, v, DefaultLogInterval))
		}
	}
	return spec, errs
}

// LogLine is the text of step k.
func LogLine(rank, step int) string {
	return fmt.Sprintf("rank %d step %d", rank, step)
}

// LineTime is when step k (1-based) is written by a container that started at start.
func (s LogSpec) LineTime(start time.Time, step int) time.Time {
	return start.Add(time.Duration(step-1) * s.Interval)
}

// DueSteps returns the highest step written by time until: a container that has run from
// start to until has written steps 1..DueSteps.
func (s LogSpec) DueSteps(start, until time.Time) int {
	if s.Lines == 0 || until.Before(start) {
		return 0
	}
	if s.Interval <= 0 {
		return s.Lines
	}
	n := int(until.Sub(start)/s.Interval) + 1
	return min(n, s.Lines)
}

// CRILine formats one stdout line as the container runtime writes it to a kubelet log file,
// which is what kwok reads back for `kubectl logs`.
func CRILine(ts time.Time, text string) string {
	return ts.UTC().Format(time.RFC3339Nano) + " stdout F " + text + "\n"
}

// RenderSteps returns the CRI lines for steps from+1..to.
func (s LogSpec) RenderSteps(start time.Time, from, to int) string {
	var out []byte
	for k := from + 1; k <= to; k++ {
		out = append(out, CRILine(s.LineTime(start, k), LogLine(s.Rank, k))...)
	}
	return string(out)
}
