package jobspec

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestHostfile(t *testing.T) {
	for _, tc := range []struct {
		name         string
		job          string
		nodes, slots int
		want, hydra  string
	}{
		{name: "one host", job: "solo", nodes: 1, slots: 8,
			want: "solo-0.solo slots=8\n", hydra: "solo-0.solo:8\n"},
		{name: "two hosts of four", job: "mpi", nodes: 2, slots: 4,
			want:  "mpi-0.mpi slots=4\nmpi-1.mpi slots=4\n",
			hydra: "mpi-0.mpi:4\nmpi-1.mpi:4\n"},
		{name: "one slot each, ranks in index order", job: "a", nodes: 3, slots: 1,
			want:  "a-0.a slots=1\na-1.a slots=1\na-2.a slots=1\n",
			hydra: "a-0.a:1\na-1.a:1\na-2.a:1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, Hostfile(tc.job, tc.nodes, tc.slots)); d != "" {
				t.Errorf("Hostfile (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.hydra, HydraHostfile(tc.job, tc.nodes, tc.slots)); d != "" {
				t.Errorf("HydraHostfile (-want +got):\n%s", d)
			}
		})
	}
}

func TestPodHost(t *testing.T) {
	if got, want := PodHost("ddp", 11), "ddp-11.ddp"; got != want {
		t.Errorf("PodHost = %q, want %q", got, want)
	}
}

// deepSpeedHostPattern and parseDeepSpeedHostfile transcribe _parse_hostfile of DeepSpeed's
// launcher (deepspeedai/DeepSpeed, deepspeed/launcher/runner.py): each stripped line is
// skipped when it starts with "#" or is empty, must otherwise match ^(\S+)\s+slots=(\d+)
// (re.search, so anything after the digits is ignored), may not name a host twice, and the
// file must name at least one host. Python's \s and \S are Unicode-aware, Go's ASCII-only:
// the same for the ASCII names a job has.
var deepSpeedHostPattern = regexp.MustCompile(`^(\S+)\s+slots=(\d+)`)

type deepSpeedHost struct {
	host  string
	slots int
}

func parseDeepSpeedHostfile(text string) ([]deepSpeedHost, error) {
	var pool []deepSpeedHost
	seen := map[string]bool{}
	// fd.readlines() keeps each line's "\n", which line.strip() then removes.
	for _, line := range strings.SplitAfter(text, "\n") {
		line = strings.TrimSpace(line)
		match := deepSpeedHostPattern.FindStringSubmatch(line)
		switch {
		case strings.HasPrefix(line, "#") || line == "":
			continue
		case match != nil:
			if seen[match[1]] {
				return nil, fmt.Errorf("Hostfile contains multiple entries for %s, unable to proceed with launching", match[1])
			}
			seen[match[1]] = true
			n, err := strconv.Atoi(match[2])
			if err != nil {
				return nil, err
			}
			pool = append(pool, deepSpeedHost{host: match[1], slots: n})
		default:
			return nil, fmt.Errorf("Hostfile contains a bad entry: %s, unable to proceed with launching", line)
		}
	}
	if len(pool) == 0 {
		return nil, fmt.Errorf("Hostfile is empty or not formatted correctly, unable to proceed with launching.")
	}
	return pool, nil
}

func TestHostfileReadByDeepSpeed(t *testing.T) {
	// The transcription itself refuses what DeepSpeed refuses.
	for _, bad := range []string{"", "# only a comment\n", "host\n", "a slots=1\na slots=2\n", "a:4\n"} {
		if _, err := parseDeepSpeedHostfile(bad); err == nil {
			t.Errorf("parseDeepSpeedHostfile(%q) accepted it, DeepSpeed refuses it", bad)
		}
	}
	for _, tc := range []struct{ nodes, slots int }{{1, 1}, {1, 8}, {2, 4}, {16, 8}} {
		got, err := parseDeepSpeedHostfile(Hostfile("train", tc.nodes, tc.slots))
		if err != nil {
			t.Fatalf("%d nodes of %d slots: DeepSpeed would refuse the hostfile: %v", tc.nodes, tc.slots, err)
		}
		var want []deepSpeedHost
		for i := range tc.nodes {
			want = append(want, deepSpeedHost{host: PodHost("train", i), slots: tc.slots})
		}
		if d := cmp.Diff(want, got, cmp.AllowUnexported(deepSpeedHost{})); d != "" {
			t.Errorf("%d nodes of %d slots: DeepSpeed reads (-want +got):\n%s", tc.nodes, tc.slots, d)
		}
	}
}
