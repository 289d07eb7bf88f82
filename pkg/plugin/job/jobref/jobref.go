// Package jobref reads the JOB argument of every command: a pure core, table- and fuzz-tested.
package jobref

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// Parse accepts a Job the way kubectl users write it: NAME, job/NAME, jobs/NAME,
// job.batch/NAME or jobs.batch/NAME, and returns NAME.
func Parse(ref string) (string, error) {
	name := ref
	if kind, n, ok := strings.Cut(ref, "/"); ok {
		switch kind {
		case "job", "jobs", "job.batch", "jobs.batch":
			name = n
		default:
			return "", exitcode.Usagef("%q is not a Job: use NAME, job/NAME or job.batch/NAME", ref)
		}
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return "", exitcode.Usagef("invalid job name %q: %s", name, strings.Join(msgs, "; "))
	}
	return name, nil
}
