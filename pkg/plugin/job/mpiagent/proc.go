package mpiagent

// PodLog is where a process of an MPI job writes on a pod other than rank 0's: the container's
// own stdout and stderr, PID 1's (the supervisor), so that the kubelet keeps its output in that
// pod's log. OpenMPI's daemon would otherwise forward it to mpirun, on rank 0, where every
// process's lines end up in one log with nothing to say which pod printed them.
var PodLog = [2]string{"/proc/1/fd/1", "/proc/1/fd/2"}
