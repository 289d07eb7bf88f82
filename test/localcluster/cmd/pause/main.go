// Command pause is the real node's sandbox program (containerd's pinned sandbox image,
// local/pause:1): it holds a pod's namespaces and does nothing else. It reaps zombies, because
// it is PID 1 of a pod that shares its process namespace, and exits at once on SIGTERM or
// SIGINT, as the kubelet expects when it stops a sandbox. Built static (CGO_ENABLED=0).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		// Several children may have exited behind one SIGCHLD.
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
