//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubectl-tao/kubectl-tao/test/s3server"
)

// workdirTree writes a small project: a script, a data file, and a .env its .gitignore keeps out.
func workdirTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		full := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func workdirSubmit(ns, name, dir string, extra ...string) []string {
	return append([]string{"submit", name, "-n", ns, "--image", "busybox", "--gpus", "0",
		"--stager-image", "registry.invalid/kubectl-tao:e2e", "--workdir", dir,
		"--annotation", "sim.kubectl-tao.dev/run-duration=1s"}, extra...)
}

// assertNoWorkdirConfigMap fails if a failed submit left its ConfigMap.
func assertNoWorkdirConfigMap(t *testing.T, ns, job string) {
	t.Helper()
	if _, err := client.CoreV1().ConfigMaps(ns).Get(context.Background(), job+"-workdir", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("configmap/%s-workdir survived a failed submit: %v", job, err)
	}
}

// TestWorkdirConfigMap: the snapshot travels in a ConfigMap owned by the Job, its checksum is on
// the Job and in status -o json; each way a submit can fail leaves nothing behind.
func TestWorkdirConfigMap(t *testing.T) {
	ns := namespace(t)
	dir := workdirTree(t, map[string]string{"run.sh": "cat data.csv\n", "data.csv": "1,2\n", ".gitignore": ".env\n", ".env": "TOKEN=x\n"})
	r := tao(t, nil, append(workdirSubmit(ns, "snap", dir), "--", "bash run.sh")...)
	contains(t, r, 0, "configmap/snap-workdir created", "workdir "+dir+": 3 files")
	ctx := context.Background()
	job, err := client.BatchV1().Jobs(ns).Get(ctx, "snap", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "snap-workdir", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if refs := cm.OwnerReferences; len(refs) != 1 || refs[0].UID != job.UID || cm.Immutable == nil || !*cm.Immutable {
		t.Errorf("configmap owners %+v, immutable %v: want the Job, immutable", refs, cm.Immutable)
	}
	sum := job.Annotations["kubectl-tao.dev/workdir-sha256"]
	if len(sum) != 64 || !strings.Contains(r.stderr, "sha256 "+sum) {
		t.Errorf("annotation %q, stderr %q", sum, r.stderr)
	}
	st := tao(t, nil, "status", "snap", "-n", ns, "-o", "json")
	var m map[string]any
	if err := json.Unmarshal([]byte(st.stdout), &m); err != nil || m["workdirSHA256"] != sum {
		t.Errorf("status -o json: %s (%v), want workdirSHA256 %s", st.stdout, err, sum)
	}
	// The same tree again gives the same checksum (client dry run: nothing is sent).
	again := tao(t, nil, append(workdirSubmit(ns, "again", dir), "--dry-run=client", "-o", "name", "--", "true")...)
	contains(t, again, 0, "sha256 "+sum, "would ship in ConfigMap again-workdir")

	t.Run("configmap-denied", func(t *testing.T) {
		ns := namespace(t)
		grantRole(t, ns, "jobs-only-user", manageJobs)
		r := tao(t, nil, append(workdirSubmit(ns, "denied", dir, "--as", "jobs-only-user"), "--", "true")...)
		contains(t, r, 6, "creating configmap/denied-workdir", "forbidden")
		assertRolledBack(t, ns, "denied", r)
	})
	t.Run("configmap-exists", func(t *testing.T) {
		ns := namespace(t)
		// The user's own ConfigMap of that name: submit fails on it and leaves it alone.
		mine := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "taken-workdir", Namespace: ns}, Data: map[string]string{"k": "v"}}
		if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, mine, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		r := tao(t, nil, append(workdirSubmit(ns, "taken", dir), "--", "true")...)
		contains(t, r, 4, "configmap/taken-workdir already exists")
		assertRolledBack(t, ns, "taken", r)
		if _, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "taken-workdir", metav1.GetOptions{}); err != nil {
			t.Errorf("the user's own ConfigMap was touched: %v", err)
		}
	})
	t.Run("too-large", func(t *testing.T) {
		ns := namespace(t)
		r := tao(t, nil, append(workdirSubmit(ns, "big", dir, "--workdir-max-size", "10"), "--", "true")...)
		contains(t, r, 2, "more than --workdir-max-size", "run.sh")
		assertNoObjects(t, ns)
		assertNoWorkdirConfigMap(t, ns, "big")
	})
	t.Run("failed-upload", func(t *testing.T) {
		ns := namespace(t)
		srv := s3server.Start(t)
		r := tao(t, srv.Env("no-such-bucket"), append(workdirSubmit(ns, "lost", dir), "--", "true")...)
		contains(t, r, 3, "uploading the --workdir archive")
		assertRolledBack(t, ns, "lost", r)
		secrets, err := client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=kubectl-tao"})
		if err != nil || len(secrets.Items) != 0 {
			t.Fatalf("secrets left: %v %v", secrets, err)
		}
	})
}
