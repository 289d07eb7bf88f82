package jobspec

import "strings"

// The wrapper's own failure codes s3layout.ExitStageIn and ExitStageOut, as the script spells
// them (constants, to build the script's constants; TestStagedWrapperCodes keeps them equal).
const (
	exitStageIn  = "201"
	exitStageOut = "202"
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
//   - only staging needs a wrapper script (see stagedPrelude and WrapperShell for why it is
//     bash).
//
// The user's program is therefore often the container's main process. Were it PID 1 of its PID
// namespace, the kernel would drop every signal it has no handler for, and a plain
// `python train.py` would ignore SIGTERM on cancel until the grace period ends in SIGKILL. The
// pod shares one PID namespace (shareProcessNamespace, see Build) so that the pause container is
// PID 1 and SIGTERM keeps its default meaning, while a program that handles it still gets it.

// With staging the wrapper cannot exec the command: it must still be there afterwards to run
// `stage out`, or to fail an attempt the pod was told to stop. So it runs each step as a child
// and stays the container's main process:
//
//   - SIGTERM and SIGINT are trapped and forwarded
//     to the running child, the command or `stage in`, so a training process can checkpoint
//     exactly as it would under exec;
//   - `wait` returns early when a trapped signal arrives, so the wrapper waits again until the
//     child has really exited, and keeps the child's own status (127 is what a shell says for a
//     child already waited for: the status from before is kept then);
//   - a signal that came between two steps is sent to the next child as soon as it exists;
//   - the child resets SIGINT and SIGQUIT, which a shell ignores in background jobs, and keeps
//     the container's stdin (a shell would give a background job /dev/null).
//
// The steps and their exit codes:
//
//  1. `stage in` (when there are inputs). If a signal came while it ran, the command does not
//     start (exit 128+signal); if it fails, the command never runs and the wrapper exits with
//     s3layout.ExitStageIn, not stage in's own code, which would pass for the command's (the
//     pod failure policy fails the Job on it at once; stage in's code is on stderr).
//  2. the command. With outputs it runs under `stage run` (unless --no-log-archive), which
//     passes its output through, keeps it in a file uploaded as this rank's log archive every
//     minute and once the command has ended, forwards the signals it gets from the wrapper to it
//     and exits with its code (the logarchive package). With --checkpoint-dir the command always
//     runs under `stage run`, on every rank, which restores the checkpoints before it (exit 201
//     when it cannot), keeps them while it runs and uploads the last ones once it ends, within
//     the grace period after a SIGTERM (the checkpoint package). Without outputs the wrapper
//     execs `stage run` when there is one, and runs the command as a child otherwise.
//  3. if the pod was told to stop (SIGTERM or SIGINT came), the attempt is not done whatever
//     the command's code: the wrapper (and `stage run`, which gets the signal too) exits
//     128+signal, so that the Job retries the index instead of recording it complete (the pod
//     failure policy's rule 0 makes an eviction's retry free), and `stage out` is skipped: a
//     stopped attempt's outputs are not the run's results.
//  4. `stage out`, always otherwise, even when the command failed (in a multi-node job on rank
//     0 only: the result keys carry no rank, so ranks would overwrite each other). It runs in
//     the foreground: a signal arriving now lets the upload go on until the grace period ends.
//  5. exit with the command's own code; if the command succeeded but `stage out` failed, with
//     s3layout.ExitStageOut instead, because the results were lost and the Job must not look
//     Complete (and --retries must not rerun the training for a failed upload).
//
// An OOM kill of the container or a SIGKILL (the end of the grace period) takes the wrapper with
// it: nothing is uploaded then.
const (
	stagedPrelude = `sig= last= got= child= rc=0
fwd() { sig=$1 last=$1 got=$2; [ -z "$child" ] || kill -s "$1" "$child" 2>/dev/null; }
trap 'fwd TERM 143' TERM
trap 'fwd INT 130' INT
run() {
  (trap - INT QUIT; exec "$@") <&0 &
  child=$!
  [ -z "$last" ] || kill -s "$last" "$child" 2>/dev/null
  wait "$child"; rc=$?
  while [ -n "$sig" ]; do
    sig=
    wait "$child"; r=$?
    [ "$r" -eq 127 ] || rc=$r
  done
  child=
}
`
	stagedIn = `run "$TAO_STAGER" stage in
if [ -n "$got" ]; then
  echo "kubectl-tao: signalled during stage in: the command was not run" >&2
  exit "$got"
fi
if [ "$rc" -ne 0 ]; then
  echo "kubectl-tao: stage in failed (exit code $rc): the command was not run" >&2
  exit ` + exitStageIn + `
fi
`
	// stagedStopped turns the command's code into 128+signal once the pod was told to stop: an
	// attempt that saved and exited 0 on SIGTERM would otherwise mark its index done and never
	// be retried. `stage run` does the same itself, so that line is said once.
	stagedStopped = `if [ -n "$got" ]; then
  [ "$rc" -eq "$got" ] || echo "kubectl-tao: the pod was told to stop (SIG$last): the command exited $rc; exiting $got so that this attempt does not count as done" >&2
  rc=$got
fi
`
	// stagedOutStopped keeps a stopped attempt's outputs out of the run's results: they are
	// those of an unfinished run, and the attempt that finishes uploads its own.
	stagedOutStopped = `if [ -n "$got" ]; then
  echo "kubectl-tao: stage out skipped: the outputs of a stopped attempt are not the run's results" >&2
  exit "$rc"
fi
`
	stagedOut = `out=0
"$TAO_STAGER" stage out || out=$?
if [ "$out" -ne 0 ]; then
  if [ "$rc" -eq 0 ]; then
    echo "kubectl-tao: stage out failed (exit code $out): the command succeeded but its outputs were not uploaded" >&2
    exit ` + exitStageOut + `
  fi
  echo "kubectl-tao: stage out failed (exit code $out) after the command failed (exit code $rc)" >&2
fi
exit "$rc"
`
	// stagedArchive runs the command under `stage run`, which keeps and uploads its log.
	stagedArchive = `"$TAO_STAGER" stage run -- `
	// stagedRunNoArchive is `stage run` for the checkpoints alone (--no-log-archive).
	stagedRunNoArchive = `"$TAO_STAGER" stage run --no-log-archive -- `
	// stagedRankZero ends other ranks of a multi-node job before stage out.
	stagedRankZero = `[ "$` + EnvNodeRank + `" = 0 ] || exit "$rc"
`
)

// ContainerCommand is the container's command, before the kubelet's $(VAR) expansion (every
// part is escaped against it).
//
//   - one string:    /bin/bash -c STRING                       (exactly the SDK's form)
//   - argv:          ARG...                                    (no shell at all)
//   - with staging:  /bin/bash -c STAGED_SCRIPT kubectl-tao ARG... (see stagedPrelude)
func ContainerCommand(s Spec) []string {
	if s.Staging == nil {
		if len(s.Command) == 1 {
			return []string{Shell, "-c", EscapeKubelet(s.Command[0])}
		}
		out := make([]string, len(s.Command))
		for i, a := range s.Command {
			out[i] = EscapeKubelet(a)
		}
		return out
	}
	out := []string{WrapperShell, "-c", EscapeKubelet(stagedScript(s)), argv0}
	for _, a := range s.Command {
		out = append(out, EscapeKubelet(a))
	}
	return out
}

// UserCommand recovers the command the user typed from a container's command and args, the
// inverse of ContainerCommand: the staging wrapper is dropped and the kubelet's "$$" escape is
// undone. It returns the argv (one element for a bash string) and whether it was a bash string.
// A container that submit did not make comes back as its full argv.
func UserCommand(command, args []string) (argv []string, bashString bool) {
	all := append(append([]string{}, command...), args...)
	switch {
	case len(all) == 3 && all[0] == Shell && all[1] == "-c":
		all, bashString = all[2:], true
	case len(all) >= 4 && all[0] == WrapperShell && all[1] == "-c" && all[3] == argv0:
		all = all[4:]
		bashString = len(all) == 1
	}
	out := make([]string, len(all))
	for i, a := range all {
		out[i] = strings.ReplaceAll(a, "$$", "$")
	}
	return out, bashString
}

// stagedScript assembles the wrapper for a staged job from the parts above.
func stagedScript(s Spec) string {
	st := s.Staging
	script := stagedPrelude
	if len(st.Inputs) > 0 {
		script += stagedIn
	}
	command := `"$@"`
	if len(s.Command) == 1 {
		command = Shell + ` -c "$1"`
	}
	stageRun := true
	switch {
	case st.Checkpoints != nil && st.NoLogArchive:
		command = stagedRunNoArchive + command
	case st.Checkpoints != nil || (len(st.Outputs) > 0 && !st.NoLogArchive):
		command = stagedArchive + command
	default:
		stageRun = false
	}
	if len(st.Outputs) == 0 && stageRun {
		// Nothing to do afterwards: hand the container over to `stage run`, which forwards the
		// signals and turns a stop into a failure itself.
		return script + "trap - TERM INT\nexec " + command + "\n"
	}
	script += "run " + command + "\n" + stagedStopped
	if len(st.Outputs) == 0 {
		return script + "exit \"$rc\"\n"
	}
	if s.MultiNode() {
		script += stagedRankZero
	}
	return script + stagedOutStopped + stagedOut
}
