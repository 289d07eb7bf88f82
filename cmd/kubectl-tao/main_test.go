package main

import (
	"os"
	"runtime/metrics"
	"testing"
)

// gcCyclesAtStart is how many collections had run when the tests started, that is, during the
// initialisation of every package main links.
var gcCyclesAtStart uint64

func TestMain(m *testing.M) {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	gcCyclesAtStart = s[0].Value.Uint64()
	os.Exit(m.Run())
}

// gcstart must initialise before the heavy packages (client-go's scheme alone pushes the heap
// past the first goal): this fails if it is not imported, or if a change of import paths makes
// it initialise later.
func TestNoCollectionDuringInit(t *testing.T) {
	if gcCyclesAtStart != 0 {
		t.Fatalf("%d garbage collections ran while packages initialised; want none", gcCyclesAtStart)
	}
}
