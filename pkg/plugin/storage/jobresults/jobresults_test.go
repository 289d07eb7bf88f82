package jobresults

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
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

// A Job has results in S3 with outputs, or with a --workdir snapshot uploaded there; a snapshot
// in a ConfigMap (no staging Secret) or staging for inputs alone leaves nothing under the prefix.
func TestHasResults(t *testing.T) {
	const sum = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        bool
		err         string
	}{
		{"plain", nil, false, ""},
		{"outputs", map[string]string{s3layout.AnnotationOutputs: `["/results"]`, s3layout.AnnotationS3Secret: "j-s3"}, true, ""},
		{"workdir through S3", map[string]string{s3layout.AnnotationWorkdirSHA256: sum, s3layout.AnnotationS3Secret: "j-s3"}, true, ""},
		{"workdir in a ConfigMap", map[string]string{s3layout.AnnotationWorkdirSHA256: sum}, false, ""},
		{"inputs only", map[string]string{s3layout.AnnotationS3Secret: "j-s3"}, false, ""},
		{"broken outputs", map[string]string{s3layout.AnnotationOutputs: `/results`}, false, "is not a JSON array"},
	} {
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", Annotations: tc.annotations}}
		got, err := HasResults(job)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: got %v, %v; want %v, error %q", tc.name, got, err, tc.want, tc.err)
		}
	}
}

// --uid must name exactly one run of the job name: anything that would make another prefix (or
// none) is a usage error that names the flag and the value; no --uid passes.
func TestValidateUID(t *testing.T) {
	for _, tc := range []struct {
		name, job, uid string
		err            string // "" for no error
	}{
		{"no --uid", "train", "", ""},
		{"a UID", "train", "0d6c2a5e-7f1b-4c7e-9a1d-3b2f4e5a6c7d", ""},
		{"a slash", "train", "a/b", `--uid: invalid job UID "a/b" for a results prefix`},
		{"parent", "train", "..", `--uid: invalid job UID ".." for a results prefix`},
		{"dot", "train", ".", `--uid: invalid job UID "." for a results prefix`},
		{"newline", "train", "a\nb", `--uid: invalid job UID "a\nb" for a results prefix`},
		{"NUL", "train", "a\x00", `--uid: invalid job UID "a\x00" for a results prefix`},
		{"bad job name", "a/b", "uid", `--uid: invalid job name "a/b" for a results prefix`},
	} {
		err := ValidateUID(tc.job, tc.uid)
		if tc.err == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || err.Error() != tc.err || exitcode.Of(err) != exitcode.Usage {
			t.Errorf("%s: got %v (exit %d), want %q (exit %d)", tc.name, err, exitcode.Of(err), tc.err, exitcode.Usage)
		}
	}
}
