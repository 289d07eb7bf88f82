package mpiagent

import (
	"fmt"
	"strconv"
)

// EnvLogPID is the PID of the supervisor that serves the agent, in the environment of every
// command it runs: its stdout and stderr are the container's, which the kubelet keeps as the
// pod's log. The pod's PID 1 is the pause container (the pod shares one PID namespace), so
// the supervisor is named, not found.
const EnvLogPID = "TAO_MPI_LOG_PID"

// PodLog is where a process of an MPI job writes on a pod other than rank 0's: the stdout and
// stderr of the supervisor of PID pid, so that the kubelet keeps its output in that pod's log.
// OpenMPI's daemon would otherwise forward it to mpirun on rank 0, where every process's lines
// end up in one log with nothing to say which pod printed them.
func PodLog(pid int) [2]string {
	return [2]string{fmt.Sprintf("/proc/%d/fd/1", pid), fmt.Sprintf("/proc/%d/fd/2", pid)}
}

// LogPID reads EnvLogPID's value; ok is false when it is not a PID.
func LogPID(v string) (pid int, ok bool) {
	pid, err := strconv.Atoi(v)
	return pid, err == nil && pid > 0
}
