//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/test/s3server"
)

// workdirScript prints, per rank, where it runs, the snapshot's checksum from the pod's
// environment next to a fingerprint of the files themselves (their names and total size: the
// test image has no sha256sum), and the shipped data file.
const workdirScript = `set -e
r=${NODE_RANK:-0}
echo "rank $r pwd $(pwd)"
echo "rank $r sum $TAO_WORKDIR_SHA256 files $(ls -AR | tr -s '\n' ',')$(cat run.sh data/labels.csv | wc -c)"
echo "rank $r data $(cat data/labels.csv)"
[ -e scratch ] || echo "rank $r scratch left out"
`

// TestRealNodeWorkdir runs a script shipped with --workdir on the real node: every rank runs
// in /workspace, sees the same files (the same checksums), reads the data file shipped with
// it, and not what .taoignore left out; through a ConfigMap and through S3; an edit gives a
// new checksum.
func TestRealNodeWorkdir(t *testing.T) {
	n := realNode(t)
	if n.StagerImage == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("the real node has no stager image under CI=true")
		}
		t.Skip("the real node has no stager image (make stager-image)")
	}
	t.Parallel()
	ns := namespace(t)
	dir := workdirTree(t, map[string]string{
		"run.sh": workdirScript, "data/labels.csv": "cat,dog", ".taoignore": "scratch/\n", "scratch/cache.bin": "not shipped",
	})
	flags := []string{"--stager-image", n.StagerImage, "--shm-size", "0", "--workdir", dir}
	srv := s3server.StartOn(t, n.IP)
	srv.MakeBucket(t, "results")

	// run submits job with --nodes nodes, waits for it, and returns the checksum every rank
	// printed (failing unless they all agree with each other and with the Job).
	run := func(t *testing.T, job string, nodes int, env []string) string {
		t.Helper()
		submitRealEnv(t, env, n, ns, job, append(slices.Clone(flags), "--nodes", strconv.Itoa(nodes)), "bash run.sh")
		waitComplete(t, ns, job)
		j, err := client.BatchV1().Jobs(ns).Get(context.Background(), job, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := j.Annotations["kubectl-tao.dev/workdir-sha256"]
		logs := jobLogs(t, ns, job)
		var files string
		for rank := range nodes {
			p := "rank " + strconv.Itoa(rank) + " "
			lines := logs[rank]
			for _, w := range []string{p + "pwd /workspace", p + "data cat,dog", p + "scratch left out"} {
				if !slices.Contains(lines, w) {
					t.Errorf("rank %d lacks %q: %q", rank, w, lines)
				}
			}
			i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, p+"sum ") })
			if i < 0 {
				t.Fatalf("rank %d printed no checksum: %q", rank, lines)
			}
			f := strings.Fields(lines[i])
			if len(f) != 6 || f[3] != want {
				t.Errorf("rank %d: %q, want TAO_WORKDIR_SHA256 %s and a fingerprint", rank, lines[i], want)
				continue
			}
			if rank == 0 {
				files = f[5]
			} else if f[5] != files {
				t.Errorf("rank %d sees files with checksum %s, rank 0 %s", rank, f[5], files)
			}
		}
		return want
	}

	var first string
	t.Run("configmap-2-ranks", func(t *testing.T) {
		first = run(t, "snap", 2, nil)
	})
	t.Run("s3-2-ranks", func(t *testing.T) {
		sum := run(t, "snap-s3", 2, srv.Env("results"))
		if first != "" && sum != first {
			t.Errorf("the same tree through S3 has checksum %s, through a ConfigMap %s", sum, first)
		}
		j, err := client.BatchV1().Jobs(ns).Get(context.Background(), "snap-s3", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		key := "results/snap-s3/" + string(j.UID) + "/.kubectl-tao/workdir.tar.zst"
		if keys := srv.Keys(t, "results", "results/snap-s3/"); !slices.Equal(keys, []string{key}) {
			t.Errorf("in S3: %q, want %q", keys, key)
		}
	})
	t.Run("edited", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(dir, "data/labels.csv"), []byte("cat,dog,bird"), 0o644); err != nil {
			t.Fatal(err)
		}
		submitReal(t, n, ns, "snap-edited", append(slices.Clone(flags), "--nodes", "1"), "bash run.sh")
		waitComplete(t, ns, "snap-edited")
		logs := jobLogs(t, ns, "snap-edited")
		if !slices.Contains(logs[0], "rank 0 data cat,dog,bird") {
			t.Errorf("the edit did not arrive: %q", logs[0])
		}
		j, err := client.BatchV1().Jobs(ns).Get(context.Background(), "snap-edited", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sum := j.Annotations["kubectl-tao.dev/workdir-sha256"]; sum == "" || sum == first {
			t.Errorf("after an edit the checksum is %q, before it %q", sum, first)
		}
	})
}
