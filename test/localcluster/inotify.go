package localcluster

import (
	"errors"
	"fmt"
	"os"
	"strconv"
)

// PodsPerNode is each simulated node's pod capacity, the kubelet's default.
const PodsPerNode = 110

// inotifyInstances is how many inotify instances one user may hold, shared by all the user's
// processes.
const inotifyInstances = "fs.inotify.max_user_instances"

// The bounds of InotifyInstancesWanted: the headroom is for the control plane, Kueue's
// certificate watcher and the user's other processes.
const (
	inotifyHeadroom     = 256
	inotifyInstancesMin = 1024
	inotifyInstancesMax = 65536
)

// InotifyInstancesWanted is fs.inotify.max_user_instances sized for a cluster of nodes
// simulated nodes. kwok serves each followed log (`logs -f`) with an inotify instance of its
// own, so every pod the nodes can hold may take one; past the limit a follow fails with
// "failed to create fsnotify watcher: too many open files".
func InotifyInstancesWanted(nodes int) int {
	return min(max(nodes*PodsPerNode+inotifyHeadroom, inotifyInstancesMin), inotifyInstancesMax)
}

// raiseInotifyInstances raises fs.inotify.max_user_instances to want, never lowering it, with
// read and write (readSysctl and writeSysctl). Where it may not (not root, a read-only /proc/sys
// in a container) it says once what the limit limits and the command that raises it. A host
// without the setting (not Linux) has nothing to raise.
func raiseInotifyInstances(want int, read func(string) (string, bool), write func(name, value string) error, logf func(string, ...any)) {
	value, ok := read(inotifyInstances)
	if !ok {
		return
	}
	have, err := strconv.Atoi(value)
	if err != nil || have >= want {
		return
	}
	if err := write(inotifyInstances, strconv.Itoa(want)); err == nil {
		logf("raised %s from %d to %d (kwok takes one per followed log)", inotifyInstances, have, want)
		return
	} else if !errors.Is(err, os.ErrPermission) {
		logf("could not raise %s: %v", inotifyInstances, err)
	}
	logf("%s", inotifyAdvice(have, want))
}

// inotifyAdvice says what a low fs.inotify.max_user_instances limits and how to raise it.
func inotifyAdvice(have, want int) string {
	return fmt.Sprintf("fs.inotify.max_user_instances is %d: kwok serves each followed log with an inotify instance, "+
		"so `logs -f` of more than about %d ranks at once (fewer, as other processes hold some) fails with "+
		"\"too many open files\"; raise it with: sudo sysctl -w fs.inotify.max_user_instances=%d", have, have, want)
}
