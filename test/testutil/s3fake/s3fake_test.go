package s3fake_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

// What is put reads back, an empty object too (stored past minio-go's chunked upload), and is
// listed as written when the fixed clock said, where the test moves it.
func TestPutGetKeysAndClock(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := s3fake.Start(t, s3fake.Options{Bucket: "results", Now: t0})
	s.Put("a/x", "hello")
	s.Clock.Advance(time.Hour)
	s.Put("a/dir/", "")
	s.Put("b/y", "other")
	if got := s.Get("a/x"); got != "hello" {
		t.Errorf("a/x = %q", got)
	}
	if got := strings.Join(s.Keys("a/"), " "); got != "a/dir/ a/x" {
		t.Errorf("keys under a/: %s", got)
	}
	if got := s.Get("a/dir/"); got != "" {
		t.Errorf("a/dir/ = %q", got)
	}
	for o := range s.Client.ListObjects(context.Background(), s.Bucket, minio.ListObjectsOptions{Prefix: "b/"}) {
		if o.Err != nil || !o.LastModified.Equal(t0.Add(time.Hour)) {
			t.Errorf("b/y listed as written at %s (%v), want %s", o.LastModified, o.Err, t0.Add(time.Hour))
		}
	}
	env := s.Env()
	if env["S3_BUCKET_NAME"] != "results" || env["S3_ENDPOINT_URL"] != s.Endpoint || env["SECRET_KEY"] != s.SecretKey || env["ACCESS_KEY"] == "" {
		t.Errorf("env %v", env)
	}
}
