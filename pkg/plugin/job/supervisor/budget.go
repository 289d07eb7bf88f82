package supervisor

import "time"

// DefaultGrace is Kubernetes' own default termination grace period, for a pod that did not say.
const DefaultGrace = 30 * time.Second

// Budget splits the pod's termination grace period between what has to happen after the pod
// is told to stop: the command saves and exits, its last checkpoint files are uploaded, then
// its log archive; the kubelet kills the container at the end of the grace period whatever is
// left. The rule:
//
//   - a margin, a twentieth of the period and at least a second, is kept for the supervisor to
//     exit before the kubelet's SIGKILL;
//   - the log archive keeps the last tenth, between 2 s and 15 s: it is one small object;
//   - the command has the first half to save and exit, then its process group is killed;
//   - the checkpoints' last upload has what is left between the command's exit and the
//     archive's share.
//
// Each phase ends at a deadline counted from the stop, not after a duration of its own: a
// command that saves in two seconds leaves the rest of its half to the upload. A command that
// ends by itself is treated as stopped at its end with its half spent: the phases after it get
// what they would have had. Outputs are uploaded (stage out) only by an attempt that was not
// told to stop; if the stop comes during that upload, it goes on until the archive's deadline.
type Budget struct {
	// Grace is the pod's terminationGracePeriodSeconds (DefaultGrace when 0).
	Grace time.Duration
}

// Phases are the deadlines of a Budget, as offsets from the stop.
type Phases struct {
	// Command: the command's process group is killed at this offset.
	Command time.Duration
	// Checkpoints: the last checkpoint upload ends by this offset.
	Checkpoints time.Duration
	// Archive: the log archive's last upload (and an interrupted stage out) ends by this offset.
	Archive time.Duration
}

// Phases computes the deadlines.
func (b Budget) Phases() Phases {
	g := b.Grace
	if g <= 0 {
		g = DefaultGrace
	}
	margin := max(time.Second, g/20)
	archive := min(max(2*time.Second, g/10), 15*time.Second)
	end := g - margin
	return Phases{Command: g / 2, Checkpoints: max(end-archive, g/2), Archive: end}
}
