package workdir_test

import (
	"context"
	"crypto/rand"
	"testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/workdir"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

// Upload puts the archive at the run's key, reports its progress up to the whole size, and
// its remove takes the object away again.
func TestUploadProgressAndRemove(t *testing.T) {
	store := s3fake.Start(t, s3fake.Options{})
	ctx := context.Background()
	data := make([]byte, 3<<20)
	_, _ = rand.Read(data)
	archive := &workdir.Archive{} // in three frames of uneven sizes, read back as one object
	for _, frame := range [][]byte{data[:1<<20], data[1<<20 : 2<<20+5], data[2<<20+5:]} {
		_, _ = archive.Write(frame)
	}
	var reports []int64
	remove, err := workdir.Upload(ctx, store.Client, store.Bucket, "train", "uid-1", archive, func(done int64) { reports = append(reports, done) })
	if err != nil {
		t.Fatal(err)
	}
	const key = "results/train/uid-1/.kubectl-tao/workdir.tar.zst"
	if got := store.Get(key); got != string(data) {
		t.Fatalf("%s: %d bytes, want the %d of the archive", key, len(got), len(data))
	}
	if len(reports) == 0 || reports[len(reports)-1] != int64(len(data)) {
		t.Errorf("progress reports %v, want them to end at %d", reports, len(data))
	}
	for i := 1; i < len(reports); i++ {
		if reports[i] < reports[i-1] {
			t.Errorf("progress went back: %v", reports)
		}
	}
	if err := remove(ctx); err != nil {
		t.Fatal(err)
	}
	if len(store.Keys(key)) != 0 {
		t.Errorf("%s is still there after remove", key)
	}
}
