//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
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

// treeOf describes every entry below root but those skip names: its kind, permission bits,
// and a file's SHA-256 or a link's target.
func treeOf(t *testing.T, root string, skip ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		for _, s := range skip {
			if rel == s {
				return nil
			}
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			out[rel] = "link -> " + target
			return err
		case info.IsDir():
			out[rel] = fmt.Sprintf("dir %o", info.Mode().Perm())
		default:
			data, err := os.ReadFile(p)
			sum := sha256.Sum256(data)
			out[rel] = fmt.Sprintf("file %o %x", info.Mode().Perm(), sum)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestWorkdirResultsDownload: a snapshot submit uploaded to S3 is an object of the run like any
// other; `results --download` gives back the exact archive (its SHA-256 is status's
// workdirSHA256), and unpacked it is the tree the job was submitted with, file by file, modes
// included, less what .gitignore kept out. The upload is submit's own, so the KWOK cluster and
// the S3 test server on loopback suffice.
func TestWorkdirResultsDownload(t *testing.T) {
	ns := namespace(t)
	srv := s3server.Start(t)
	srv.MakeBucket(t, "results")
	env := srv.Env("results")
	dir := workdirTree(t, map[string]string{
		"train.py": "print('hi')\n", "data/labels.csv": "cat,dog\n", "pkg/model/net.py": "# net\n",
		".gitignore": ".env\n", ".env": "TOKEN=do-not-ship\n",
	})
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("python3 train.py\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("data/labels.csv", filepath.Join(dir, "labels")); err != nil {
		t.Fatal(err)
	}
	r := tao(t, env, append(workdirSubmit(ns, "code", dir), "--", "bash run.sh")...)
	contains(t, r, 0, "secret/code-s3 created", "workdir "+dir+": 5 files")
	st := tao(t, nil, "status", "code", "-n", ns, "-o", "json")
	var status struct {
		WorkdirSHA256 string `json:"workdirSHA256"`
	}
	if err := json.Unmarshal([]byte(st.stdout), &status); err != nil || len(status.WorkdirSHA256) != 64 {
		t.Fatalf("status: %s (%v)", st, err)
	}
	sum := status.WorkdirSHA256

	const key = ".kubectl-tao/workdir.tar.zst"
	ls := tao(t, env, "results", "code", "-n", ns, "-o", "jsonpath={.objects[*].key}")
	if ls.code != 0 || ls.stdout != key {
		t.Fatalf("results lists %s, want only the snapshot %s", ls, key)
	}
	dl := t.TempDir()
	contains(t, tao(t, env, "results", "code", "-n", ns, "--download", dl), 0, "1 object (")
	archive := filepath.Join(dl, key)
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum {
		t.Fatalf("downloaded snapshot has sha256 %x, status says %s", got, sum)
	}
	// Unpacked as the pod's init container does (which checks the checksum first).
	unpacked := filepath.Join(t.TempDir(), "workspace")
	u := tao(t, []string{"TAO_WORKDIR_SHA256=" + sum}, "stage", "workdir", "--archive", archive, "--to", unpacked)
	contains(t, u, 0, "workdir: unpacked 5 files")
	want, got := treeOf(t, dir, ".env"), treeOf(t, unpacked)
	if len(want) != 9 { // 5 files, 3 directories (data, pkg, pkg/model), 1 link
		t.Fatalf("the source tree is not what the test wrote: %v", want)
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: unpacked %q, submitted %q", p, got[p], w)
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s (%s) was not in the submitted tree", p, g)
		}
	}
	if leaks := srv.Leaks(r.stdout, r.stderr, ls.stdout, ls.stderr); len(leaks) > 0 {
		t.Errorf("a secret was printed")
	}
}
