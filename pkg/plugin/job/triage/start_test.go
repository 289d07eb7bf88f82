package triage

import (
	"strings"
	"testing"
)

func TestStartFailure(t *testing.T) {
	for msg, want := range map[string]string{
		`failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: exec: "/bin/bash": stat /bin/bash: no such file or directory: unknown`: "The image has no /bin/bash",
		`OCI runtime create failed: runc create failed: unable to start container process: exec: "train": executable file not found in $PATH: unknown`:                                                                                                       "The image has no train",
		`unable to start container process: exec: "/app/run": permission denied: unknown`:                                                                                                                                                                    "/app/run is not executable",
		`something else entirely`: "check the image's entrypoint",
	} {
		if got := startFailure(msg); !strings.Contains(got, want) {
			t.Errorf("startFailure(%q) = %q, want it to contain %q", msg, got, want)
		}
	}
}
