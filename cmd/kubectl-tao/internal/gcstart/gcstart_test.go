package gcstart

import (
	"runtime/debug"
	"testing"
)

func TestRestoreGivesBackTheEnvironmentsSetting(t *testing.T) {
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Fatalf("after initialisation the collector is at %d%%, want off (-1)", got)
	}
	percent = 75
	Restore()
	if got := debug.SetGCPercent(100); got != 75 {
		t.Errorf("Restore set %d%%, want 75%%", got)
	}
}
