package jobspec

// The wrapper scripts. They run as `/bin/bash -c SCRIPT kubectl-tao ARG...`, so the user's
// command travels as positional parameters and is never re-parsed or re-quoted: arguments with
// spaces, quotes, "$", ";", newlines or any unicode arrive byte for byte. Without staging each
// script ends in `exec`, so SIGTERM on cancel or preemption reaches the training process itself.
const (
	// scriptArgv runs an argv as given.
	scriptArgv = `exec "$@"`
	// rankPrelude exports NODE_RANK from the index the Job controller gives each pod. It fails
	// loudly outside an Indexed Job instead of letting every rank believe it is rank 0.
	rankPrelude = `export ` + EnvNodeRank + `="${` + EnvCompletionIndex + `:?is not set: multi-node pods must run in an Indexed Job}"` + "\n"
	// scriptShell runs one bash command string, as the SDK does, after the prelude.
	scriptShell = `exec ` + Shell + ` -c "$1"`
)

// With staging the wrapper cannot exec the command: it must still be there afterwards to run
// `stage out`. So it runs each step as a child and stays PID 1 of the container:
//
//   - SIGTERM and SIGINT are trapped (PID 1 without a handler would ignore them) and forwarded
//     to the running child, the command or `stage in`, so a training process can checkpoint
//     exactly as it would under exec;
//   - `wait` returns early when a trapped signal arrives, so the wrapper waits again until the
//     child has really exited, and keeps the child's own status (127 is what an old bash says
//     for a child already waited for: the status from before is kept then);
//   - a signal that came between two steps is sent to the next child as soon as it exists;
//   - the child resets SIGINT and SIGQUIT, which bash ignores in background jobs, and keeps the
//     container's stdin (bash would give a background job /dev/null).
//
// The steps and their exit codes:
//
//  1. `stage in` (when there are inputs). If it fails, the wrapper exits with its code and the
//     command never runs; if a signal came while it ran, the command does not start either
//     (exit 128+signal).
//  2. the command. Without outputs the wrapper execs it, exactly as without staging.
//  3. `stage out`, always, even when the command failed or was signalled (in a multi-node job on
//     rank 0 only: the result keys carry no rank, so ranks would overwrite each other). It runs
//     in the foreground: a signal arriving now lets the upload go on until the grace period ends.
//  4. exit with the command's own code; if the command succeeded but `stage out` failed, with
//     stage out's code instead, because the results were lost and the Job must not look
//     Complete.
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
if [ "$rc" -ne 0 ]; then
  echo "kubectl-tao: stage in failed (exit code $rc): the command was not run" >&2
  exit "$rc"
fi
if [ -n "$got" ]; then
  echo "kubectl-tao: signalled during stage in: the command was not run" >&2
  exit "$got"
fi
`
	stagedOut = `out=0
"$TAO_STAGER" stage out || out=$?
if [ "$out" -ne 0 ]; then
  if [ "$rc" -eq 0 ]; then
    echo "kubectl-tao: stage out failed (exit code $out): the command succeeded but its outputs were not uploaded" >&2
    exit "$out"
  fi
  echo "kubectl-tao: stage out failed (exit code $out) after the command failed (exit code $rc)" >&2
fi
exit "$rc"
`
	// stagedRankZero ends other ranks of a multi-node job before stage out.
	stagedRankZero = `[ "$` + EnvNodeRank + `" = 0 ] || exit "$rc"
`
)

// ContainerCommand is the container's command, before the kubelet's $(VAR) expansion (every
// part is escaped against it).
//
//   - single node, one string:  /bin/bash -c COMMAND              (exactly the SDK's form)
//   - single node, argv:        /bin/bash -c 'exec "$@"' kubectl-tao ARG...
//   - multi-node, one string:   /bin/bash -c 'export NODE_RANK=...; exec /bin/bash -c "$1"' kubectl-tao COMMAND
//   - multi-node, argv:         /bin/bash -c 'export NODE_RANK=...; exec "$@"' kubectl-tao ARG...
//   - with staging:             /bin/bash -c STAGED_SCRIPT kubectl-tao ARG... (see stagedPrelude)
func ContainerCommand(s Spec) []string {
	var script string
	switch {
	case s.Staging != nil:
		script = stagedScript(s)
	case !s.MultiNode() && len(s.Command) == 1:
		return []string{Shell, "-c", EscapeKubelet(s.Command[0])}
	case !s.MultiNode():
		script = scriptArgv
	case len(s.Command) == 1:
		script = rankPrelude + scriptShell
	default:
		script = rankPrelude + scriptArgv
	}
	out := []string{Shell, "-c", EscapeKubelet(script), argv0}
	for _, a := range s.Command {
		out = append(out, EscapeKubelet(a))
	}
	return out
}

// stagedScript assembles the wrapper for a staged job from the parts above.
func stagedScript(s Spec) string {
	script := ""
	if s.MultiNode() {
		script = rankPrelude
	}
	script += stagedPrelude
	if len(s.Staging.Inputs) > 0 {
		script += stagedIn
	}
	command := `"$@"`
	if len(s.Command) == 1 {
		command = Shell + ` -c "$1"`
	}
	if len(s.Staging.Outputs) == 0 {
		// Nothing to do afterwards: hand the container over to the command, as without staging.
		return script + "trap - TERM INT\nexec " + command + "\n"
	}
	script += "run " + command + "\n"
	if s.MultiNode() {
		script += stagedRankZero
	}
	return script + stagedOut
}
