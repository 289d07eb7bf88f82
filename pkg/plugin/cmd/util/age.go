package util

import (
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
)

// Age is an AGE cell as kubectl prints it ("5m", "3d4h"), or "<unknown>" for a zero time, so
// that every table of the plugin shows ages alike.
func Age(since, now time.Time) string {
	if since.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(since))
}
