//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/trickyargs"
)

// literalEnv is an --env value the kubelet would expand if submit did not escape it.
const literalEnv = "LITERAL=$(HOME) and $$ and $(WORLD_SIZE)"

// TestRealNodeCommandContract sends the wrapper unit test's tricky argv entries, and bash
// strings, through the real kubelet's $(VAR) expansion and the real bash wrapper: the trainer
// prints the argv and environment it got, in hex.
func TestRealNodeCommandContract(t *testing.T) {
	n := realNode(t)
	t.Parallel()
	ns := namespace(t)
	printArgs := []string{trainerPath, "--print-args", "--steps", "0", "--rendezvous=false", "--"}
	// A bash string as users write them: bash expands it in the pod, after the kubelet left it
	// alone. $$ is bash's PID (the kubelet would have made it a lone "$", a syntax error here).
	script := "X='$(HOME)'; Y=\"üñí ✓; \\$\"\n" +
		strings.Join(printArgs, " ") + ` "$X" "$Y" "$(printf %s sub)" "$(( $$ > 0 ))" 'x;y' "$NODE_RANK" "${MASTER_ADDR:-none}"`
	cases := []struct {
		name    string
		nodes   int
		command []string
		want    func(rank int, job string) []string
	}{
		{"argv-1-rank", 1, append(slices.Clone(printArgs), trickyargs.Args...), func(int, string) []string { return trickyargs.Args }},
		{"argv-2-ranks", 2, append(slices.Clone(printArgs), trickyargs.Args...), func(int, string) []string { return trickyargs.Args }},
		{"string-1-rank", 1, []string{script}, func(int, string) []string {
			return []string{"$(HOME)", "üñí ✓; $", "sub", "1", "x;y", "", "none"}
		}},
		{"string-2-ranks", 2, []string{script}, func(rank int, job string) []string {
			return []string{"$(HOME)", "üñí ✓; $", "sub", "1", "x;y", strconv.Itoa(rank), job + "-0." + job}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			job := c.name
			submitReal(t, n, ns, job, []string{"--nodes", strconv.Itoa(c.nodes), "--shm-size", "0", "--env", literalEnv}, c.command...)
			waitComplete(t, ns, job)
			assertArgv(t, jobLogs(t, ns, job), c.nodes, func(rank int) []string { return c.want(rank, job) })
		})
	}
}

// assertArgv checks the argv line of each of a job's ranks: the trainer's positional arguments
// are want(rank), and literalEnv is in its environment.
func assertArgv(t *testing.T, logs map[int][]string, nodes int, want func(rank int) []string) {
	t.Helper()
	if len(logs) != nodes {
		t.Fatalf("logs of %d ranks, want %d: %v", len(logs), nodes, logs)
	}
	for rank := range nodes {
		got := decodeArgv(t, logs[rank], rank)
		if got.Args[0] != trainerPath {
			t.Errorf("rank %d: argv[0] = %q, want %s", rank, got.Args[0], trainerPath)
		}
		if w := want(rank); !slices.Equal(afterDashes(got.Args), w) {
			t.Errorf("rank %d: arguments\n got %q\nwant %q", rank, afterDashes(got.Args), w)
		}
		if !slices.Contains(got.Env, literalEnv) {
			t.Errorf("rank %d: %q not in the environment %q", rank, literalEnv, got.Env)
		}
	}
}

// TestRealNodeRendezvous runs 2- and 4-rank trainer jobs: every rank finds rank 0 through the
// headless Service's DNS name in MASTER_ADDR, and they pass a barrier together.
func TestRealNodeRendezvous(t *testing.T) {
	n := realNode(t)
	t.Parallel()
	ns := namespace(t)
	for _, ranks := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d-ranks", ranks), func(t *testing.T) {
			t.Parallel()
			job := fmt.Sprintf("ddp%d", ranks)
			submitReal(t, n, ns, job, []string{"--nodes", strconv.Itoa(ranks), "--shm-size", "64Mi"}, trainerPath, "--steps", "2")
			waitComplete(t, ns, job)
			logs := jobLogs(t, ns, job)
			if len(logs) != ranks {
				t.Fatalf("logs of %d ranks, want %d", len(logs), ranks)
			}
			// Each rank's pod IP, as the rank itself sees it (a finished pod's status may no
			// longer say), checked against the API's where it still does.
			ips := map[int]string{}
			apiIPs := rankPodIPs(t, ns, job)
			var peers []string
			for rank := range ranks {
				lines := logs[rank]
				var info trainerInfo
				trainerJSON(t, lines, rank, "info", &info)
				if info.WorldSize != ranks || info.NodeRank != strconv.Itoa(rank) || info.CompletionIndex != strconv.Itoa(rank) ||
					info.MasterAddr != job+"-0."+job || info.MasterPort != "29500" || len(info.IPs) != 1 {
					t.Fatalf("rank %d: info %+v", rank, info)
				}
				ips[rank] = info.IPs[0]
				if api := apiIPs[rank]; api != "" && api != ips[rank] {
					t.Errorf("rank %d: pod IP %s, but the rank sees %s", rank, api, ips[rank])
				}
				for _, want := range []string{fmt.Sprintf("barrier passed, world size %d", ranks), "step 2", "done, exit code 0"} {
					if !hasLine(lines, rank, want) {
						t.Errorf("rank %d: no %q in\n%s", rank, want, strings.Join(lines, "\n"))
					}
				}
			}
			for rank := 1; rank < ranks; rank++ {
				lines := logs[rank]
				peers = append(peers, strconv.Itoa(rank))
				if !hasLine(lines, rank, fmt.Sprintf("resolved MASTER_ADDR %s-0.%s to %s", job, job, ips[0])) {
					t.Errorf("rank %d: MASTER_ADDR did not resolve to rank 0's pod IP %s:\n%s", rank, ips[0], strings.Join(lines, "\n"))
				}
				if !containsPrefix(logs[0], fmt.Sprintf("rank 0 accepted rank %d from %s:", rank, ips[rank])) {
					t.Errorf("rank 0 did not accept rank %d from its pod IP %s:\n%s", rank, ips[rank], strings.Join(logs[0], "\n"))
				}
			}
			if !hasLine(logs[0], 0, "saw peers "+strings.Join(peers, ",")) {
				t.Errorf("rank 0 did not see peers %v:\n%s", peers, strings.Join(logs[0], "\n"))
			}
		})
	}
}

func containsPrefix(lines []string, prefix string) bool {
	return slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
}
