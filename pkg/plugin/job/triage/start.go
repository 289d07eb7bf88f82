package triage

import (
	"fmt"
	"regexp"
	"strings"
)

// execFailure finds the program the runtime could not exec in its StartError message, e.g.
// runc's `exec: "/bin/bash": stat /bin/bash: no such file or directory` or
// `exec: "train": executable file not found in $PATH`.
var execFailure = regexp.MustCompile(`exec: "([^"]+)": (.*?)(?:: unknown)?$`)

// startFailure explains a container whose process never started (containerd's StartError, exit
// code 128): most often a program the image does not have. A bash command string needs
// /bin/bash in the image; an argv runs without any shell.
func startFailure(msg string) string {
	m := execFailure.FindStringSubmatch(msg)
	if m == nil {
		return "The container runtime could not start the command: check the image's entrypoint and the command."
	}
	prog, why := m[1], m[2]
	switch {
	case prog == "/bin/bash" && strings.Contains(why, "no such file"):
		return "The image has no /bin/bash, which a command given as one string needs (it runs as bash -c STRING). " +
			"Give the command as separate arguments (kubectl tao submit ... -- python train.py), which needs no shell, " +
			"or use an image with bash."
	case strings.Contains(why, "no such file") || strings.Contains(why, "not found"):
		return fmt.Sprintf("The image has no %s. Check the command's first word and the image's PATH.", prog)
	case strings.Contains(why, "permission denied"):
		return fmt.Sprintf("%s is not executable in the image (permission denied).", prog)
	}
	return fmt.Sprintf("The container runtime could not exec %s: %s.", prog, why)
}
