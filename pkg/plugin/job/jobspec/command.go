package jobspec

import (
	"slices"
	"strings"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// How the user's command becomes the container's command. No shell is put in front of it unless
// the command needs one:
//
//   - an argv runs as the container's command itself (every "$" escaped against the kubelet's
//     $(VAR) expansion), so images without any shell (distroless, scratch) run it, and nothing
//     re-parses or re-quotes it: spaces, quotes, "$", ";", newlines and any unicode arrive byte
//     for byte;
//   - one string is a bash command string, as in the SDK: `/bin/bash -c STRING`;
//   - NODE_RANK of a multi-node job comes from the downward API (the pod's completion-index
//     annotation, see containerEnv), not from a shell prelude;
//   - staging runs it under the supervisor, still without a shell (below).
//
// The user's program is therefore often the container's main process. Were it PID 1 of its PID
// namespace, the kernel would drop every signal it has no handler for, and a plain
// `python train.py` would ignore SIGTERM on cancel until the grace period ends in SIGKILL. The
// pod shares one PID namespace (shareProcessNamespace, see Build) so that the pause container is
// PID 1 and SIGTERM keeps its default meaning, while a program that handles it still gets it.

// With staging (S3 inputs or outputs, kept checkpoints, the log archive) the container's
// entrypoint is the supervisor: the kubectl-tao binary the stager init container installed,
// as `stage run [--no-log-archive] -- COMMAND...`, with the command as its child in a process
// group of its own. It stays the container's main process to run what comes after the command
// (the last checkpoint upload, the log archive, stage out) and to fail an attempt the pod was
// told to stop; the phases, the signals, the exit codes and the grace budget are all in the
// supervisor package. No shell is put in front of the command here either: an image without
// one runs an argv.

// ContainerCommand is the container's command, before the kubelet's $(VAR) expansion (every
// part is escaped against it).
//
//   - one string:    /bin/bash -c STRING                                  (exactly the SDK's form)
//   - argv:          ARG...                                               (no shell at all)
//   - with staging:  /tao-stager/kubectl-tao stage run [--no-log-archive] -- ARG... (or -- /bin/bash -c STRING)
func ContainerCommand(s Spec) []string {
	user := userArgv(s.Command)
	if s.Staging == nil {
		return user
	}
	out := []string{s3layout.StagerBinary, "stage", "run"}
	if !s.Staging.logArchive() {
		out = append(out, "--no-log-archive")
	}
	return append(append(out, "--"), user...)
}

// userArgv is the user's command as an argv, escaped: a bash string runs under bash.
func userArgv(command []string) []string {
	if len(command) == 1 {
		return []string{Shell, "-c", EscapeKubelet(command[0])}
	}
	out := make([]string, len(command))
	for i, a := range command {
		out[i] = EscapeKubelet(a)
	}
	return out
}

// logArchive reports whether the ranks' logs are archived: by default when there are results to
// keep them with (outputs or checkpoints), unless --no-log-archive.
func (st *Staging) logArchive() bool {
	return !st.NoLogArchive && (len(st.Outputs) > 0 || st.Checkpoints != nil)
}

// UserCommand recovers the command the user typed from a container's command and args, the
// inverse of ContainerCommand: the supervisor's entrypoint (or the bash wrapper of Jobs made by
// older versions) is dropped and the kubelet's "$$" escape is undone. It returns the argv (one
// element for a bash string) and whether it was a bash string. A container that submit did not
// make comes back as its full argv.
func UserCommand(command, args []string) (argv []string, bashString bool) {
	all := append(append([]string{}, command...), args...)
	if len(all) >= 4 && all[0] == s3layout.StagerBinary && all[1] == "stage" && all[2] == "run" {
		if i := slices.Index(all, "--"); i > 0 {
			all = all[i+1:]
		}
	}
	switch {
	case len(all) == 3 && all[0] == Shell && all[1] == "-c":
		all, bashString = all[2:], true
	case len(all) >= 4 && all[0] == legacyWrapperShell && all[1] == "-c" && all[3] == legacyArgv0:
		all = all[4:]
		bashString = len(all) == 1
	}
	out := make([]string, len(all))
	for i, a := range all {
		out[i] = strings.ReplaceAll(a, "$$", "$")
	}
	return out, bashString
}
