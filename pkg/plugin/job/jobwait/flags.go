package jobwait

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// DefaultStuckTimeout is --stuck-timeout's default: long enough for a slow image pull's
// back-off or a cluster autoscaler to bring a node, short enough that a job that can never
// start does not hold a script (or a CI run) for hours.
const DefaultStuckTimeout = 10 * time.Minute

// AddStuckTimeoutFlag declares --stuck-timeout, which wait, logs -f and submit --wait/--follow
// share, setting *d to its default.
func AddStuckTimeoutFlag(fl *pflag.FlagSet, d *time.Duration) {
	fl.DurationVar(d, "stuck-timeout", DefaultStuckTimeout, "Give up (exit code 12) once ranks have been unable to start for this long, as when an image cannot be pulled "+
		"or no node can take a pod; 0 waits forever.")
}

// ValidateStuckTimeout checks a --stuck-timeout value: 0 means no limit, a negative one is a
// usage error.
func ValidateStuckTimeout(d time.Duration) error {
	if d < 0 {
		return exitcode.Usagef("invalid --stuck-timeout %s: must not be negative", d)
	}
	return nil
}
