package localcluster

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestLogSpecFor(t *testing.T) {
	tests := []struct {
		name    string
		ann     map[string]string
		want    LogSpec
		wantErr int
	}{
		{"defaults", nil, LogSpec{Rank: 0, Lines: 10, Interval: 0}, 0},
		{"indexed", map[string]string{CompletionIndexAnnotation: "3", AnnotationLogLines: "4", AnnotationLogInterval: "250ms"}, LogSpec{Rank: 3, Lines: 4, Interval: 250 * time.Millisecond}, 0},
		{"malformed falls back", map[string]string{AnnotationLogLines: "many", AnnotationLogInterval: "soon"}, LogSpec{Lines: 10}, 2},
		{"negative lines", map[string]string{AnnotationLogLines: "-1"}, LogSpec{Lines: 10}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, errs := LogSpecFor(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tt.ann}})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("LogSpecFor mismatch (-want +got):\n%s", diff)
			}
			if len(errs) != tt.wantErr {
				t.Errorf("errors %v, want %d", errs, tt.wantErr)
			}
		})
	}
}

func TestDueSteps(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	all := LogSpec{Lines: 10}
	if got := all.DueSteps(start, start); got != 10 {
		t.Errorf("interval 0: %d steps due at start, want all 10", got)
	}
	if got := all.DueSteps(start, start.Add(-time.Second)); got != 0 {
		t.Errorf("before start: %d", got)
	}
	paced := LogSpec{Lines: 5, Interval: time.Second}
	for _, c := range []struct {
		after time.Duration
		want  int
	}{{0, 1}, {999 * time.Millisecond, 1}, {time.Second, 2}, {3500 * time.Millisecond, 4}, {time.Hour, 5}} {
		if got := paced.DueSteps(start, start.Add(c.after)); got != c.want {
			t.Errorf("after %s: %d steps, want %d", c.after, got, c.want)
		}
	}
	if got := (LogSpec{Lines: 0}).DueSteps(start, start.Add(time.Hour)); got != 0 {
		t.Errorf("zero lines: %d", got)
	}
}

func TestRenderSteps(t *testing.T) {
	start := time.Date(2026, 11, 29, 18, 55, 2, 576411471, time.UTC)
	s := LogSpec{Rank: 1, Lines: 3, Interval: time.Second}
	got := s.RenderSteps(start, 1, 3)
	want := "2026-11-29T18:55:03.576411471Z stdout F rank 1 step 2\n" +
		"2026-11-29T18:55:04.576411471Z stdout F rank 1 step 3\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if s.RenderSteps(start, 3, 3) != "" {
		t.Error("no steps due must render nothing")
	}
	// Every line must be a valid CRI line: timestamp, stream, tag, text.
	for _, line := range strings.Split(strings.TrimSpace(LogSpec{Lines: 2}.RenderSteps(start, 0, 2)), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) != 4 || f[1] != "stdout" || f[2] != "F" {
			t.Errorf("bad CRI line %q", line)
		}
		if _, err := time.Parse(time.RFC3339Nano, f[0]); err != nil {
			t.Errorf("bad timestamp in %q: %v", line, err)
		}
	}
}

func TestLogsObject(t *testing.T) {
	o := LogsObject("ns", "p", "uid-1", []string{"a", "b"}, "/x/ns/p_uid-1")
	if o.GetKind() != "Logs" || o.GetNamespace() != "ns" || o.GetName() != "p" {
		t.Fatalf("object = %v", o.Object)
	}
	refs := o.GetOwnerReferences()
	if len(refs) != 1 || refs[0].UID != "uid-1" || refs[0].Kind != "Pod" {
		t.Errorf("owner references = %+v; the pod must own it so GC removes it", refs)
	}
	logs := o.Object["spec"].(map[string]any)["logs"].([]any)
	if len(logs) != 2 || logs[1].(map[string]any)["logsFile"] != "/x/ns/p_uid-1/b.log" {
		t.Errorf("logs = %v", logs)
	}
}
