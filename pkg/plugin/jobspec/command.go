package jobspec

// The wrapper scripts. They run as `/bin/bash -c SCRIPT kubectl-tao ARG...`, so the user's
// command travels as positional parameters and is never re-parsed or re-quoted: arguments with
// spaces, quotes, "$", ";", newlines or any unicode arrive byte for byte. Each script ends in
// `exec`, so SIGTERM on cancel or preemption reaches the training process itself.
const (
	// scriptArgv runs an argv as given.
	scriptArgv = `exec "$@"`
	// rankPrelude exports NODE_RANK from the index the Job controller gives each pod. It fails
	// loudly outside an Indexed Job instead of letting every rank believe it is rank 0.
	rankPrelude = `export ` + EnvNodeRank + `="${` + EnvCompletionIndex + `:?is not set: multi-node pods must run in an Indexed Job}"` + "\n"
	// scriptShell runs one bash command string, as the SDK does, after the prelude.
	scriptShell = `exec ` + Shell + ` -c "$1"`
)

// ContainerCommand is the container's command, before the kubelet's $(VAR) expansion (every
// part is escaped against it).
//
//   - single node, one string:  /bin/bash -c COMMAND              (exactly the SDK's form)
//   - single node, argv:        /bin/bash -c 'exec "$@"' kubectl-tao ARG...
//   - multi-node, one string:   /bin/bash -c 'export NODE_RANK=...; exec /bin/bash -c "$1"' kubectl-tao COMMAND
//   - multi-node, argv:         /bin/bash -c 'export NODE_RANK=...; exec "$@"' kubectl-tao ARG...
func ContainerCommand(s Spec) []string {
	var script string
	switch {
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
