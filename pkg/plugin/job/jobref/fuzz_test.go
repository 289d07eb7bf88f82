package jobref

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// FuzzParse holds the JOB argument of every command to what Parse promises (make
// fuzz-short, make fuzz): an accepted reference is a valid object name that reads the same in
// each spelling kubectl users write; a refused one is a usage error and no name.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"train", "job/train", "jobs.batch/train", "pod/train", "job/", "Train", "a/b/c", "job.batch/a.b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		name, err := Parse(ref)
		if err != nil {
			if name != "" {
				t.Fatalf("Parse(%q) refused it (%v) but returned %q", ref, err, name)
			}
			if exitcode.Of(err) != exitcode.Usage {
				t.Fatalf("Parse(%q): exit code %d, want the usage error's", ref, exitcode.Of(err))
			}
			return
		}
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			t.Fatalf("Parse(%q) accepted %q: %v", ref, name, msgs)
		}
		for _, spelling := range []string{name, "job/" + name, "jobs/" + name, "job.batch/" + name, "jobs.batch/" + name} {
			if again, err := Parse(spelling); err != nil || again != name {
				t.Fatalf("Parse(%q) = %q, but Parse(%q) = %q, %v", ref, name, spelling, again, err)
			}
		}
	})
}
