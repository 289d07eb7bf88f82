// Package s3server runs a real S3 server for tests: versitygw (github.com/versity/versitygw,
// Apache-2.0) with a posix backend in a temporary directory, on a free loopback port, with root
// credentials. It checks SigV4 signatures, so wrong credentials fail as they would on AWS.
// `make versitygw` installs the binary (once per machine) where Binary finds it.
package s3server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Version is the versitygw release the Makefile installs.
const Version = "v1.8.0"

// EnvBinary overrides where the versitygw binary is.
const EnvBinary = "VERSITYGW"

// Binary is $VERSITYGW, else the Makefile's cache: <user cache>/kubectl-tao/tools/versitygw-<Version>/versitygw.
func Binary() (string, error) {
	if b := os.Getenv(EnvBinary); b != "" {
		return b, nil
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "kubectl-tao", "tools", "versitygw-"+Version, "versitygw"), nil
}

// Server is one running versitygw.
type Server struct {
	// Endpoint is http://HOST:PORT (127.0.0.1 unless StartOn), the S3_ENDPOINT_URL to use.
	Endpoint  string
	AccessKey string
	SecretKey string
	// Dir is the posix backend: one directory per bucket.
	Dir string
	// Client is a minio client with the root credentials, for test setup and checks.
	Client *minio.Client
}

// Start runs versitygw on loopback until the test ends. It fails the test when the binary is
// missing (run `make versitygw`) or the server does not answer within 30 seconds.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartOn(t, "127.0.0.1")
}

// StartOn is Start on another local address: the real node's bridge address, where its pods
// reach the host (loopback is the pod's own).
func StartOn(t testing.TB, host string) *Server {
	t.Helper()
	started := time.Now()
	s, stop, err := Run(host, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	t.Logf("versitygw serving on %s after %s", s.Endpoint, time.Since(started).Round(time.Millisecond))
	return s
}

// Run is StartOn outside a test (the benchmarks): versitygw with its posix backend in dir,
// serving until stop is called.
func Run(host, dir string) (s *Server, stop func(), err error) {
	bin, err := Binary()
	if err != nil {
		return nil, nil, err
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, nil, fmt.Errorf("versitygw not found at %s (run `make versitygw`, or set $%s): %w", bin, EnvBinary, err)
	}
	s = &Server{Dir: dir, AccessKey: "AKIA" + randomHex(8), SecretKey: randomHex(20)}
	// The free port is released before versitygw binds it: on a lost race, try another.
	for attempt := 0; attempt < 3; attempt++ {
		if stop, err = s.start(bin, host); err == nil {
			return s, stop, nil
		}
	}
	return nil, nil, err
}

func (s *Server) start(bin, host string) (func(), error) {
	port, err := freePort(host)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ctx, cancel := context.WithCancel(context.Background())
	// The credentials go in the environment (ROOT_ACCESS_KEY, ROOT_SECRET_KEY), not on the
	// command line where ps shows them.
	cmd := exec.CommandContext(ctx, bin, "--port", addr, "--quiet", "posix", s.Dir)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.AccessKey, "ROOT_SECRET_KEY="+s.SecretKey)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("starting versitygw: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		cancel()
		<-exited
	}
	s.Endpoint = "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Any HTTP answer (anonymous requests get 403) means it is serving.
		resp, err := http.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("versitygw exited before serving on %s:\n%s", addr, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("versitygw did not answer on %s within 30s:\n%s", addr, out.String())
		}
	}
	s.Client, err = minio.New(addr, &minio.Options{
		Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""), BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// MakeBucket creates a bucket.
func (s *Server) MakeBucket(t testing.TB, name string) {
	t.Helper()
	if err := s.Client.MakeBucket(context.Background(), name, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("making bucket %s: %v", name, err)
	}
}

// Put stores an object.
func (s *Server) Put(t testing.TB, bucket, key string, data []byte) {
	t.Helper()
	_, err := s.Client.PutObject(context.Background(), bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{})
	if err != nil {
		t.Fatalf("putting s3://%s/%s: %v", bucket, key, err)
	}
}

// Get reads an object.
func (s *Server) Get(t testing.TB, bucket, key string) []byte {
	t.Helper()
	obj, err := s.Client.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatalf("getting s3://%s/%s: %v", bucket, key, err)
	}
	defer obj.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(obj); err != nil {
		t.Fatalf("reading s3://%s/%s: %v", bucket, key, err)
	}
	return b.Bytes()
}

// Keys lists every key under prefix.
func (s *Server) Keys(t testing.TB, bucket, prefix string) []string {
	t.Helper()
	var keys []string
	for o := range s.Client.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatalf("listing s3://%s/%s: %v", bucket, prefix, o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// Env is the staging environment for this server and bucket (ACCESS_KEY, SECRET_KEY,
// S3_BUCKET_NAME, S3_ENDPOINT_URL), as KEY=VALUE strings.
func (s *Server) Env(bucket string) []string {
	return []string{"ACCESS_KEY=" + s.AccessKey, "SECRET_KEY=" + s.SecretKey, "S3_BUCKET_NAME=" + bucket, "S3_ENDPOINT_URL=" + s.Endpoint}
}

// Secrets are the values no output may contain: both keys.
func (s *Server) Secrets() []string { return []string{s.AccessKey, s.SecretKey} }

// Leaks returns the secrets found in any of outs.
func (s *Server) Leaks(outs ...string) []string {
	var found []string
	for _, sec := range s.Secrets() {
		for _, o := range outs {
			if strings.Contains(o, sec) {
				found = append(found, sec)
			}
		}
	}
	return found
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// randomHex is n random bytes in upper-case hex (crypto/rand.Read never fails).
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))
}
