package submit

import (
	"strings"
	"testing"
)

func TestDroppedRetryWarning(t *testing.T) {
	tests := []struct {
		dropped []string
		want    []string
	}{
		{dropped: nil, want: nil},
		{dropped: []string{"podFailurePolicy"}, want: []string{"spec.podFailurePolicy of the Job", "evictions and preemptions count as failures"}},
		{dropped: []string{"podReplacementPolicy", "backoffLimitPerIndex", "maxFailedIndexes"}, want: []string{
			"spec.podReplacementPolicy, spec.backoffLimitPerIndex, spec.maxFailedIndexes",
			"still terminating; retries are counted for the whole job (backoffLimit), not per rank.",
		}},
	}
	for _, tc := range tests {
		got := droppedRetryWarning(tc.dropped)
		if tc.want == nil && got != "" {
			t.Errorf("%v: %q, want nothing", tc.dropped, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%v: %q, want %q", tc.dropped, got, w)
			}
		}
		if strings.Count(got, "per rank") > 1 {
			t.Errorf("%v: the per-rank effect is said twice: %q", tc.dropped, got)
		}
	}
}
