//go:build !linux

package checkpoint

import "runtime"

// Yield makes this process use one core at most; the niceness is left alone off Linux.
func Yield() { runtime.GOMAXPROCS(1) }
