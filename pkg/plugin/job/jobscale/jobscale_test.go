package jobscale

import (
	"os"
	"testing"
)

// testdata/torchrun-rendezvous.log is what torchrun's agent printed, Debian's torch 1.13 with
// LOGLEVEL=INFO, in an elastic run of 3 agents (--nnodes 1:3, c10d), up to its first workers.
func TestLastWorldSize(t *testing.T) {
	raw, err := os.ReadFile("testdata/torchrun-rendezvous.log")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		log  string
		want int
	}{
		{string(raw), 3},
		{"", -1},
		{"step 3 world 2\n", -1},
		{"  group_world_size=3\n  group_world_size=12\n", 12},
		{"  my_group_world_size=3\n", -1},
	} {
		if got := LastWorldSize(tc.log); got != tc.want {
			t.Errorf("LastWorldSize(%.40q) = %d, want %d", tc.log, got, tc.want)
		}
	}
}
