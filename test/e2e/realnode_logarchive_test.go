//go:build e2e

package e2e

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/test/s3server"
)

// TestRealNodeLogArchiveAfterDelete: the logs of a staged 2-rank job outlive it. For a job that
// succeeds, one that fails and one that is canceled, `kubectl tao logs` after the Job is deleted
// (kubectl delete job, or cancel) prints, from the archive in S3, the lines it printed from the
// pods before, in the same order, and `logs --save` writes the same lines per rank before and
// after. The only lines the archive does not hold are rank 0's stage out report, printed by the
// wrapper after the command (and its archive) ended.
func TestRealNodeLogArchiveAfterDelete(t *testing.T) {
	n := stagerNode(t)
	t.Parallel()
	ns := namespace(t)
	srv := s3server.StartOn(t, n.IP)
	srv.MakeBucket(t, "results")
	// The Job's own Secret goes with it: after the delete, the shell gives the credentials.
	shell := srv.Env("results")
	flags := []string{"--stager-image", n.StagerImage, "--shm-size", "64Mi", "--output-path", "/results", "--nodes", "2"}

	for _, tc := range []struct {
		job  string
		args []string
		want batchv1.JobConditionType // "" for the canceled job
	}{
		{"archived-ok", []string{"--steps", "3"}, batchv1.JobComplete},
		{"archived-failed", []string{"--steps", "2", "--exit", "3"}, batchv1.JobFailed},
		{"archived-canceled", []string{"--steps", "100000", "--step-delay", "250ms"}, ""},
	} {
		t.Run(tc.job, func(t *testing.T) {
			t.Parallel()
			submitRealEnv(t, shell, n, ns, tc.job, flags, append([]string{trainerPath, "--results", "/results"}, tc.args...)...)
			var before string
			saved := t.TempDir()
			if tc.want == "" {
				// Canceling deletes the Job: what `logs -f` showed until then is the "before".
				// And `logs -f --save` beside it writes the same lines, as they come, per rank.
				follow := taoBackground(t, "logs", "-f", tc.job, "-n", ns)
				saving := taoBackground(t, "logs", "-f", tc.job, "-n", ns, "--save", saved)
				follow.waitOutput(t, 2*time.Minute, "[rank 0] rank 0 step 2\n", "[rank 1] rank 1 step 2\n")
				cancelQuickly(t, ns, tc.job, 30, "the staged ranks")
				r := follow.wait(t, time.Minute)
				if r.code != 10 {
					t.Fatalf("logs -f of a canceled job: %s", r)
				}
				before = r.stdout
				if r := saving.wait(t, time.Minute); r.code != 10 || r.stdout != "" || !strings.Contains(r.stderr, "Saved ") {
					t.Fatalf("logs -f --save of a canceled job: %s", r)
				}
				assertSaved(t, saved, rankLogs(t, before))
			} else {
				if err := pollErr(3*time.Minute, jobFinished(ns, tc.job, tc.want)); err != nil {
					t.Fatalf("%v\n%s", err, tao(t, nil, "logs", tc.job, "-n", ns))
				}
				r := tao(t, nil, "logs", tc.job, "-n", ns)
				if r.code != 0 || strings.Contains(r.stderr, "archived") {
					t.Fatalf("logs from the pods: %s", r)
				}
				before = r.stdout
				contains(t, tao(t, nil, "logs", tc.job, "-n", ns, "--save", saved), 0, "Saved ")
				assertSaved(t, saved, rankLogs(t, before))
				deleteJob(t, ns, tc.job)
			}

			after := tao(t, shell, "logs", tc.job, "-n", ns)
			if after.code != 0 || !strings.Contains(after.stderr, "Reading the archived logs of job.batch/"+tc.job+" (uid ") ||
				!strings.HasSuffix(after.stderr, ": the Job is gone.\n") {
				t.Fatalf("logs after the delete: %s", after)
			}
			live, archived := rankLogs(t, before), rankLogs(t, after.stdout)
			if len(archived) != 2 {
				t.Fatalf("archived ranks %v, want 0 and 1:\n%s", slices.Sorted(maps.Keys(archived)), after.stdout)
			}
			for rank, lines := range live {
				got := archived[rank]
				if len(got) == 0 || len(got) > len(lines) || !slices.Equal(got, lines[:len(got)]) {
					t.Errorf("rank %d: archived lines are not the pod's, in order:\narchived:\n%s\npod:\n%s", rank, strings.Join(got, "\n"), strings.Join(lines, "\n"))
					continue
				}
				for _, l := range lines[len(got):] {
					if rank != 0 || !stagerLine(l) {
						t.Errorf("rank %d: the pod's line %q is missing from the archive", rank, l)
					}
				}
			}
			saved = t.TempDir()
			contains(t, tao(t, shell, "logs", tc.job, "-n", ns, "--save", saved), 0, "Saved ")
			assertSaved(t, saved, archived)
			if leaks := srv.Leaks(after.stdout, after.stderr, before); len(leaks) > 0 {
				t.Error("a credential was printed")
			}
		})
	}
}

// stagerLine is a line the staging wrapper prints after the command: stage out's report.
func stagerLine(l string) bool {
	return strings.HasPrefix(l, "stage out: ") || strings.HasPrefix(l, "kubectl-tao: ") || strings.Contains(l, " -> s3://")
}

// assertSaved checks that dir holds rank-<N>.log for each rank of want, with its lines.
func assertSaved(t *testing.T, dir string, want map[int][]string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(want) {
		t.Errorf("saved %d files for %d ranks", len(ents), len(want))
	}
	for rank, lines := range want {
		b, err := os.ReadFile(filepath.Join(dir, "rank-"+strconv.Itoa(rank)+".log"))
		if err != nil {
			t.Error(err)
			continue
		}
		if got := strings.Join(lines, "\n") + "\n"; string(b) != got {
			t.Errorf("rank-%d.log:\n%s\nwant:\n%s", rank, b, got)
		}
	}
}

// deleteJob deletes a Job as `kubectl delete job` does (its pods and owned Secret go by garbage
// collection) and waits until it is gone.
func deleteJob(t *testing.T, ns, job string) {
	t.Helper()
	ctx := context.Background()
	prop := metav1.DeletePropagationBackground
	if err := client.BatchV1().Jobs(ns).Delete(ctx, job, metav1.DeleteOptions{PropagationPolicy: &prop}); err != nil {
		t.Fatal(err)
	}
	err := pollErr(time.Minute, func(ctx context.Context) (bool, error) {
		_, err := client.BatchV1().Jobs(ns).Get(ctx, job, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		t.Fatalf("job %s still there: %v", job, err)
	}
}
