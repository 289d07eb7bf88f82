package submit

import (
	"fmt"
	"io"
	"strings"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
)

// warnDroppedRetryFields compares the Job that was sent with the one the API server returned
// and warns on stderr when the server silently dropped --retries' fields: an older cluster, or
// one with their feature gates off, stores the Job without them and retries differently.
func warnDroppedRetryFields(w io.Writer, sent, created *batchv1.Job) {
	if msg := droppedRetryWarning(jobspec.DroppedRetryFields(sent, created)); msg != "" {
		fmt.Fprintln(w, msg)
	}
}

// droppedRetryWarning says what the loss of each dropped field means for the job. "" when
// nothing was dropped.
func droppedRetryWarning(dropped []string) string {
	if len(dropped) == 0 {
		return ""
	}
	var effects []string
	for _, f := range dropped {
		switch f {
		case "podFailurePolicy":
			effects = append(effects, "evictions and preemptions count as failures, and OOM kills are retried")
		case "podReplacementPolicy":
			effects = append(effects, "a replacement pod may start while the failed one is still terminating")
		case "backoffLimitPerIndex", "maxFailedIndexes":
			if !containsString(effects, "retries are counted for the whole job (backoffLimit), not per rank") {
				effects = append(effects, "retries are counted for the whole job (backoffLimit), not per rank")
			}
		}
	}
	return fmt.Sprintf("Warning: the API server did not keep spec.%s of the Job (its Kubernetes version or feature gates "+
		"do not support them): %s. Kubernetes 1.29 or newer supports them all.",
		strings.Join(dropped, ", spec."), strings.Join(effects, "; "))
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
