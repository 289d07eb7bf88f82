package stage

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/workdir"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

// packed packs a two-file tree and returns the archive's bytes and checksum.
func packed(t *testing.T) ([]byte, string) {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "run.sh"), []byte("echo hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "data.csv"), []byte("1,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tree, err := workdir.Scan(src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	sum, err := tree.Pack(&buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), sum.SHA256
}

func TestWorkdirFromArchive(t *testing.T) {
	data, sum := packed(t)
	archive := filepath.Join(t.TempDir(), "workdir.tar.zst")
	if err := os.WriteFile(archive, data, 0o644); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "workspace")
	if _, _, err := run(map[string]string{"TAO_WORKDIR_SHA256": strings.Repeat("a", 64)}, "workdir", "--to", dest, "--archive", archive); err == nil ||
		!strings.Contains(err.Error(), "refusing to unpack") {
		t.Fatalf("wrong checksum: %v", err)
	}
	if _, _, err := run(map[string]string{}, "workdir", "--to", dest, "--archive", archive); err == nil || !strings.Contains(err.Error(), "TAO_WORKDIR_SHA256 is empty") {
		t.Fatalf("no checksum: %v", err)
	}
	_, errOut, err := run(map[string]string{"TAO_WORKDIR_SHA256": sum}, "workdir", "--to", dest, "--archive", archive)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "data.csv")); string(b) != "1,2\n" || !strings.Contains(errOut, "2 files") || !strings.Contains(errOut, sum) {
		t.Errorf("data.csv %q, stderr %q", b, errOut)
	}
}

func TestWorkdirFromS3(t *testing.T) {
	store := s3fake.Start(t, s3fake.Options{Bucket: "bucket"})
	env := store.Env()
	env["TAO_JOB_ID"], env["TAO_JOB_UID"] = "train", "0000-uid"
	data, sum := packed(t)
	env["TAO_WORKDIR_SHA256"] = sum
	dest := filepath.Join(t.TempDir(), "workspace")
	if _, _, err := run(env, "workdir", "--to", dest, "--from-s3"); err == nil {
		t.Fatal("unpacked an archive that was never uploaded")
	}
	store.Put("results/train/0000-uid/.kubectl-tao/workdir.tar.zst", string(data))
	_, errOut, err := run(env, "workdir", "--to", dest, "--from-s3")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	entries, _ := os.ReadDir(dest)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "data.csv run.sh" {
		t.Errorf("unpacked %v (the downloaded archive must be gone)", names)
	}
	if strings.Contains(errOut, store.SecretKey) {
		t.Error("the secret key was printed")
	}
}
