// Package s3fake is an in-memory S3 (gofakes3) on loopback for unit tests: one bucket, the
// staging credentials that reach it, and a client to load and read objects. It imports nothing of
// the plugin but the s3layout core, so that the storage/s3 package's own tests can use it too.
// It does not check signatures; test/s3server is the real server for that.
package s3fake

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// Options shape a server; every field may be left out.
type Options struct {
	// Bucket is the bucket made at start ("bucket" when empty).
	Bucket string
	// AccessKey and SecretKey are what Env hands the command (the server accepts any): a test
	// that checks no output holds the secret names its own (defaults when empty).
	AccessKey, SecretKey string
	// Now, when set, fixes the clock that stamps the last-modified times listings report, so
	// they are the same in every run; Server.Clock moves it. (A HEAD or GET still answers with
	// the real time: gofakes3 keeps that header apart.)
	Now time.Time
	// Wrap, when set, sits in front of the S3 handler: to count requests or inject failures.
	Wrap func(s3 http.Handler) http.Handler
}

// Server is one running in-memory S3 with its bucket made.
type Server struct {
	// Endpoint is http://127.0.0.1:PORT, the S3_ENDPOINT_URL to use.
	Endpoint             string
	Bucket               string
	AccessKey, SecretKey string
	// Client is a path-style client with the credentials, as the plugin builds one.
	Client *minio.Client
	// Clock stamps new objects when Options.Now was set; nil otherwise (the real time).
	Clock gofakes3.TimeSourceAdvancer

	t       testing.TB
	backend *s3mem.Backend
}

// Start serves an in-memory S3 until the test ends and makes its bucket.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	s := &Server{Bucket: o.Bucket, AccessKey: o.AccessKey, SecretKey: o.SecretKey, t: t}
	if s.Bucket == "" {
		s.Bucket = "bucket"
	}
	if s.AccessKey == "" {
		s.AccessKey = "AKIAS3FAKE"
	}
	if s.SecretKey == "" {
		s.SecretKey = "s3fake-not-a-secret"
	}
	var backendOpts []s3mem.Option
	if !o.Now.IsZero() {
		s.Clock = gofakes3.FixedTimeSource(o.Now)
		backendOpts = append(backendOpts, s3mem.WithTimeSource(s.Clock))
	}
	s.backend = s3mem.New(backendOpts...)
	handler := gofakes3.New(s.backend).Server()
	if o.Wrap != nil {
		handler = o.Wrap(handler)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	s.Endpoint = srv.URL
	var err error
	s.Client, err = minio.New(strings.TrimPrefix(srv.URL, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Client.MakeBucket(context.Background(), s.Bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("making bucket %s: %v", s.Bucket, err)
	}
	return s
}

// Env is the staging environment a command reads to reach the bucket (ACCESS_KEY, SECRET_KEY,
// S3_BUCKET_NAME, S3_ENDPOINT_URL), a new map on every call so that a test may add to it.
func (s *Server) Env() map[string]string {
	return map[string]string{
		s3layout.EnvAccessKey: s.AccessKey, s3layout.EnvSecretKey: s.SecretKey,
		s3layout.EnvBucket: s.Bucket, s3layout.EnvEndpoint: s.Endpoint,
	}
}

// Put stores body at key in the bucket.
func (s *Server) Put(key, body string) {
	s.t.Helper()
	if body == "" {
		// minio-go sends an empty body over plain http chunked, which gofakes3 refuses (it
		// wants a Content-Length; versitygw and S3 accept it): store it directly, with the
		// Last-Modified header gofakes3 would have recorded (from the real time) so it reads back.
		meta := map[string]string{"Last-Modified": time.Now().UTC().Format(http.TimeFormat)}
		if _, err := s.backend.PutObject(s.Bucket, key, meta, strings.NewReader(""), 0, nil); err != nil {
			s.t.Fatalf("putting s3://%s/%s: %v", s.Bucket, key, err)
		}
		return
	}
	if _, err := s.Client.PutObject(context.Background(), s.Bucket, key, strings.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		s.t.Fatalf("putting s3://%s/%s: %v", s.Bucket, key, err)
	}
}

// Get reads the object at key in the bucket.
func (s *Server) Get(key string) string {
	s.t.Helper()
	obj, err := s.Client.GetObject(context.Background(), s.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		s.t.Fatalf("getting s3://%s/%s: %v", s.Bucket, key, err)
	}
	defer obj.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(obj); err != nil {
		s.t.Fatalf("reading s3://%s/%s: %v", s.Bucket, key, err)
	}
	return b.String()
}

// Keys lists every key under prefix in the bucket, in key order.
func (s *Server) Keys(prefix string) []string {
	s.t.Helper()
	var keys []string
	for o := range s.Client.ListObjects(context.Background(), s.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			s.t.Fatalf("listing s3://%s/%s: %v", s.Bucket, prefix, o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// WriteError answers a request as S3 refuses one: status with an XML error of code (for an
// Options.Wrap that injects failures).
func WriteError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + code + `</Code><Message>injected</Message></Error>`))
}
