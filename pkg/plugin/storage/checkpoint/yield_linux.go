package checkpoint

import (
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// YieldNice is the niceness the wrapper runs at once the command has started: the training
// process and its data loaders keep the CPUs they had, and the uploads take what is left.
const YieldNice = 10

// Yield makes this process (the wrapper, which uploads the checkpoints while the command runs)
// use one core at most and run at low priority. Call it once the command has started: a
// child started before keeps its own priority. Linux sets a niceness per thread, so every
// thread of the process is lowered; the threads the Go runtime starts later inherit it.
func Yield() {
	runtime.GOMAXPROCS(1)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		_ = unix.Setpriority(unix.PRIO_PROCESS, 0, YieldNice)
		return
	}
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			_ = unix.Setpriority(unix.PRIO_PROCESS, tid, YieldNice)
		}
	}
}
