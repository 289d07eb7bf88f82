package jobscale

import (
	"os"
	"testing"
)

// testdata/torchrun-rendezvous.log is rank 0's rendezvous lines in TestRealNodeElastic on the
// real node (Debian's torch 1.13, torchrun with the job's env and LOGLEVEL=INFO): the start at
// 3 ranks, then the one after `scale --nodes 2`.
func TestLastWorldSize(t *testing.T) {
	raw, err := os.ReadFile("testdata/torchrun-rendezvous.log")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		log  string
		want int
	}{
		{string(raw), 2},
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
