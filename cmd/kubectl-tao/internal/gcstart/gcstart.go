// Package gcstart keeps the garbage collector off while Go initialises packages.
//
// Package initialisation is a third of a short command's CPU time: client-go and kubectl
// register every API group's types into their schemes and compile their regular expressions,
// some 5 MB of tables that live as long as the process. With the collector on, the heap crosses
// the runtime's first 4 MB goal halfway through and two collections run, and everything they
// find is still live: measured with `perf stat -r 40` on `kubectl tao status J -o json`, 103 ms
// of CPU with this package against 121 ms without (docs/benchmarks.md).
//
// It works because the Go specification initialises packages in import-path order among
// those whose imports are ready: this one imports only runtime/debug, and its path sorts
// before every k8s.io/ path, so it runs before any of the heavy packages. main calls Restore
// first thing, so the commands themselves run with the collector the environment asked for.
package gcstart

import "runtime/debug"

// percent is GOGC as the runtime read it from the environment (-1 for GOGC=off).
var percent = debug.SetGCPercent(-1)

// Restore turns the collector back on as GOGC says.
func Restore() {
	debug.SetGCPercent(percent)
}
