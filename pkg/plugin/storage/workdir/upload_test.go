package workdir_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http/httptest"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/minio/minio-go/v7"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/workdir"
)

// Upload puts the archive at the run's key, reports its progress up to the whole size, and
// its remove takes the object away again.
func TestUploadProgressAndRemove(t *testing.T) {
	srv := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	t.Cleanup(srv.Close)
	c, err := s3.NewClient(s3.Config{AccessKey: "AKIAEXAMPLE", SecretKey: "secret", Endpoint: srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.MakeBucket(ctx, "bucket", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3<<20)
	_, _ = rand.Read(data)
	archive := &workdir.Archive{} // in three frames of uneven sizes, read back as one object
	for _, frame := range [][]byte{data[:1<<20], data[1<<20 : 2<<20+5], data[2<<20+5:]} {
		_, _ = archive.Write(frame)
	}
	var reports []int64
	remove, err := workdir.Upload(ctx, c, "bucket", "train", "uid-1", archive, func(done int64) { reports = append(reports, done) })
	if err != nil {
		t.Fatal(err)
	}
	const key = "results/train/uid-1/.kubectl-tao/workdir.tar.zst"
	obj, err := c.GetObject(ctx, "bucket", key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("%s: %d bytes (%v), want the %d of the archive", key, len(got), err, len(data))
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
	if _, err := c.StatObject(ctx, "bucket", key, minio.StatObjectOptions{}); err == nil {
		t.Errorf("%s is still there after remove", key)
	}
}
