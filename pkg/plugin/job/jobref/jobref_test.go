package jobref

import (
	"testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]string{
		"train": "train", "job/train": "train", "jobs/train": "train", "job.batch/train": "train", "jobs.batch/train": "train",
	} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "pod/train", "job/", "Train", "job/a/b", "deployment.apps/x"} {
		if _, err := Parse(bad); exitcode.Of(err) != exitcode.Usage {
			t.Errorf("Parse(%q) = %v, want a usage error", bad, err)
		}
	}
}
