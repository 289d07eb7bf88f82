package main

import (
	"os"
	"runtime/metrics"
	"testing"
)

// TestMain checks, before anything else runs, that initialising the whole command tree ran no
// garbage collection: gcstart must come before the heavy packages (client-go's scheme alone
// would push the heap past the first goal). It fails if gcstart is not imported, or if an
// import path change makes it initialise later.
func TestMain(m *testing.M) {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	if n := s[0].Value.Uint64(); n != 0 {
		os.Stderr.WriteString("FAIL: the garbage collector ran during package initialisation; gcstart must initialise before k8s.io packages\n")
		os.Exit(1)
	}
	os.Exit(m.Run())
}
