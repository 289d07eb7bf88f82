package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

const bucket = "data"

// fakeS3 is the in-memory S3 behind a handler that can inject failures.
type fakeS3 struct {
	*s3fake.Server
	t *testing.T

	mu sync.Mutex
	// fail, when it returns a status, answers the request with it instead of S3.
	fail func(r *http.Request) int
	// truncate, when true for a request, sends half the body and breaks the connection.
	truncate func(r *http.Request) bool
	// corrupt, when true for a request, flips the last byte of the body it answers with.
	corrupt  func(r *http.Request) bool
	requests map[string]int // "METHOD /bucket/key" -> count
}

func newFakeS3(t *testing.T) *fakeS3 {
	t.Helper()
	f := &fakeS3{t: t, requests: map[string]int{}}
	f.Server = s3fake.Start(t, s3fake.Options{Bucket: bucket, Wrap: func(s3 http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			f.requests[r.Method+" "+r.URL.Path]++
			fail, truncate, corrupt := f.fail, f.truncate, f.corrupt
			f.mu.Unlock()
			if fail != nil {
				if code := fail(r); code != 0 {
					w.Header().Set("Content-Type", "application/xml")
					w.WriteHeader(code)
					fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected</Message></Error>`, codeFor(code))
					return
				}
			}
			if truncate != nil && truncate(r) {
				body := answerHeaders(s3, w, r)
				_, _ = w.Write(body[:len(body)/2])
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler) // the server closes the connection mid-body
			}
			if corrupt != nil && corrupt(r) {
				body := answerHeaders(s3, w, r)
				if len(body) > 0 {
					body[len(body)-1] ^= 0xff
				}
				_, _ = w.Write(body)
				return
			}
			s3.ServeHTTP(w, r)
		})
	}})
	return f
}

// answerHeaders has s3 answer r, sends its status and headers on w, and returns its body for
// the caller to send (or not) as it likes.
func answerHeaders(s3 http.Handler, w http.ResponseWriter, r *http.Request) []byte {
	rec := httptest.NewRecorder()
	s3.ServeHTTP(rec, r)
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	return rec.Body.Bytes()
}

func codeFor(status int) string {
	switch status {
	case 403:
		return "AccessDenied"
	case 503:
		return "ServiceUnavailable"
	}
	return "InternalError"
}

func (f *fakeS3) count(method, key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[method+" /"+bucket+"/"+key]
}

func (f *fakeS3) stager(log *bytes.Buffer) *Stager {
	return &Stager{Client: f.Client, Log: &syncWriter{w: log}, Backoff: 10 * time.Millisecond, IdleTimeout: 5 * time.Second}
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func input(t *testing.T, path, url string) s3layout.Input {
	t.Helper()
	in, err := s3layout.ParseInput(path + "=" + url)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// tree lists every file and directory below root (relative, slash-separated, dirs end in /).
func tree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			rel += "/"
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func TestDownloadObjectAndPrefix(t *testing.T) {
	f := newFakeS3(t)
	f.Put("specs/train.yaml", "epochs: 3\n")
	f.Put("ds/train/a.jpg", "aaaa")
	f.Put("ds/train/labels/a.json", "{}")
	f.Put("ds/train-other/x", "must not be downloaded") // shares the string prefix, not the directory
	f.Put("ds/val/b.jpg", "bb")
	f.Put("ds/val/", "") // a directory marker

	root := t.TempDir()
	existing := filepath.Join(root, "val")
	if err := os.MkdirAll(existing, 0o755); err != nil { // an existing directory (a mount point)
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(existing, "keep.txt"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	err := f.stager(&log).Download(context.Background(), []s3layout.Input{
		input(t, root+"/specs/train.yaml", "s3://data/specs/train.yaml"),
		input(t, root+"/train", "s3://data/ds/train/"),
		input(t, existing, "s3://data/ds/val/"),
	})
	if err != nil {
		t.Fatalf("Download: %v\n%s", err, log.String())
	}
	want := []string{"specs/", "specs/train.yaml", "train/", "train/a.jpg", "train/labels/", "train/labels/a.json",
		"val/", "val/b.jpg", "val/keep.txt"}
	if got := tree(t, root); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("tree = %v\nwant %v", got, want)
	}
	if got := readFile(t, root+"/train/labels/a.json"); got != "{}" {
		t.Errorf("a.json = %q", got)
	}
	if got := readFile(t, root+"/specs/train.yaml"); got != "epochs: 3\n" {
		t.Errorf("train.yaml = %q", got)
	}
	fi, err := os.Stat(root + "/train/a.jpg")
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("a.jpg mode = %v, %v; want 0644", fi.Mode(), err)
	}
	// One line per object with its size and duration, and a summary.
	for _, w := range []string{"s3://data/ds/train/a.jpg -> ", "(4 B in ", "stage in: 3 of 3 inputs in place; 4 objects"} {
		if !strings.Contains(log.String(), w) {
			t.Errorf("log lacks %q:\n%s", w, log.String())
		}
	}
}

func TestDownloadFailuresLeaveNothingAtTheDestination(t *testing.T) {
	f := newFakeS3(t)
	f.Put("ds/a", "a")
	f.Put("ds/b", "b")
	f.Put("ok.txt", "fine")
	f.fail = func(r *http.Request) int {
		if r.Method == http.MethodGet && r.URL.Path == "/data/ds/b" {
			return http.StatusForbidden
		}
		return 0
	}
	root := t.TempDir()
	var log bytes.Buffer
	err := f.stager(&log).Download(context.Background(), []s3layout.Input{
		input(t, root+"/ds", "s3://data/ds/"),
		input(t, root+"/missing.txt", "s3://data/nope.txt"),
		input(t, root+"/empty", "s3://data/nothing-here/"),
		input(t, root+"/ok.txt", "s3://data/ok.txt"),
	})
	if err == nil {
		t.Fatal("Download succeeded")
	}
	for _, w := range []string{
		"s3://data/ds/b: access denied (403 AccessDenied)",
		"s3://data/nope.txt: no such object (404 NoSuchKey)",
		"no objects under s3://data/nothing-here/",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
	if code := exitcode.Of(err); code != exitcode.Forbidden && code != exitcode.NotFound {
		t.Errorf("exit code %d", code)
	}
	// The good input is in place; the failed ones left nothing, not even a temporary file.
	if got := tree(t, root); strings.Join(got, " ") != "ok.txt" {
		t.Errorf("tree = %v; want only ok.txt", got)
	}
}

func TestDownloadRefusesKeysThatEscape(t *testing.T) {
	for _, rel := range []string{"a/../../etc/passwd", "a//b", "./x"} {
		if localPath(rel) {
			t.Errorf("localPath(%q) = true", rel)
		}
	}
	for _, rel := range []string{"a", "a/b.c", "..hidden/x"} {
		if !localPath(rel) {
			t.Errorf("localPath(%q) = false", rel)
		}
	}
	f := newFakeS3(t)
	f.Put("ds/ok", "x")
	f.Put("ds/sub//evil", "x")
	root := t.TempDir()
	err := f.stager(&bytes.Buffer{}).Download(context.Background(), []s3layout.Input{input(t, root+"/ds", "s3://data/ds/")})
	if err == nil || !strings.Contains(err.Error(), `refusing key "ds/sub//evil"`) {
		t.Fatalf("err = %v", err)
	}
	if got := tree(t, root); len(got) != 0 {
		t.Errorf("left %v", got)
	}
}

// firstRequests matches the first n requests with method (to path, when path is set) and no
// more: a fault that retrying gets past. The server calls it from its handler goroutines.
func firstRequests(n int, method, path string) func(*http.Request) bool {
	var mu sync.Mutex
	return func(r *http.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		if r.Method != method || (path != "" && r.URL.Path != path) || n == 0 {
			return false
		}
		n--
		return true
	}
}

// minio-go retries each request on 503 by itself: three 503s, then the object arrives.
func TestDownloadRetries503(t *testing.T) {
	f := newFakeS3(t)
	f.Put("big.bin", strings.Repeat("x", 1<<20))
	failing := firstRequests(3, http.MethodGet, "/data/big.bin")
	f.fail = func(r *http.Request) int {
		if failing(r) {
			return http.StatusServiceUnavailable
		}
		return 0
	}
	dest := filepath.Join(t.TempDir(), "big.bin")
	var log bytes.Buffer
	if err := f.stager(&log).Download(context.Background(), []s3layout.Input{input(t, dest, "s3://data/big.bin")}); err != nil {
		t.Fatalf("Download: %v", err)
	}
	if n := len(readFile(t, dest)); n != 1<<20 {
		t.Errorf("size %d", n)
	}
	if n := f.count("GET", "big.bin"); n != 4 {
		t.Errorf("GETs = %d; want 3 failed + 1", n)
	}
}

// A body that breaks after a 200 is beyond minio-go's retries: the Stager retries the object.
func TestDownloadRetriesABrokenBody(t *testing.T) {
	f := newFakeS3(t)
	data := strings.Repeat("0123456789", 100_000)
	f.Put("model.pth", data)
	f.truncate = firstRequests(1, http.MethodGet, "/data/model.pth")
	dest := filepath.Join(t.TempDir(), "model.pth")
	var log bytes.Buffer
	if err := f.stager(&log).Download(context.Background(), []s3layout.Input{input(t, dest, "s3://data/model.pth")}); err != nil {
		t.Fatalf("Download: %v\n%s", err, log.String())
	}
	if readFile(t, dest) != data {
		t.Error("content differs")
	}
	if !strings.Contains(log.String(), "retrying s3://data/model.pth") {
		t.Errorf("log:\n%s", log.String())
	}
}

// Persistent 5xx end in an error after the Stager's attempts, each retried by minio-go.
func TestDownloadGivesUpOnPersistent5xx(t *testing.T) {
	f := newFakeS3(t)
	f.Put("x", "x")
	f.fail = func(r *http.Request) int {
		if r.Method == http.MethodGet && r.URL.Path == "/data/x" {
			return http.StatusInternalServerError
		}
		return 0
	}
	// Fewer request retries than NewClient's default (10), to keep the test short.
	client, err := minio.New(strings.TrimPrefix(f.Endpoint, "http://"), &minio.Options{
		Creds: credentials.NewStaticV4(f.AccessKey, f.SecretKey, ""), BucketLookup: minio.BucketLookupPath, MaxRetries: 3})
	if err != nil {
		t.Fatal(err)
	}
	s := &Stager{Client: client, Attempts: 2, Backoff: time.Millisecond}
	err = s.Download(context.Background(), []s3layout.Input{input(t, t.TempDir()+"/x", "s3://data/x")})
	if err == nil || !strings.Contains(err.Error(), "stage in: downloading s3://data/x: S3 answered 500 InternalError: injected") {
		t.Fatalf("err = %v", err)
	}
	if n := f.count("GET", "x"); n != 6 {
		t.Errorf("GETs = %d; want 6 (2 attempts x 3 requests)", n)
	}
}

func TestUploadTreeFileAndMissing(t *testing.T) {
	f := newFakeS3(t)
	root := t.TempDir()
	write := func(rel, data string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("results/model.pth", "weights")
	write("results/logs/train.log", "loss 0.1")
	write("results/empty/keep", "k")
	write("status.json", `{"ok":true}`)
	if err := os.Symlink("model.pth", filepath.Join(root, "results/latest.pth")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("logs", filepath.Join(root, "results/logs-link")); err != nil {
		t.Fatal(err)
	}
	run := Run{Bucket: bucket, JobID: "train-1", JobUID: "uid-1"}
	var log bytes.Buffer
	err := f.stager(&log).Upload(context.Background(), run, []string{root + "/results", root + "/missing", root + "/status.json"})
	if err == nil || !strings.Contains(err.Error(), "output "+root+"/missing does not exist") || exitcode.Of(err) != exitcode.NotFound {
		t.Fatalf("err = %v", err)
	}
	base := "results/train-1/uid-1" + root
	want := []string{
		base + "/results/empty/keep",
		base + "/results/latest.pth",
		base + "/results/logs/train.log",
		base + "/results/model.pth",
		base + "/status.json",
	}
	if got := f.Keys("results/train-1/uid-1/"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("keys:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := f.Get(base + "/results/latest.pth"); got != "weights" {
		t.Errorf("latest.pth = %q", got)
	}
	for _, w := range []string{"skipping " + root + "/results/logs-link", "stage out: 2 of 3 outputs uploaded to s3://data/results/train-1/uid-1/; 5 files"} {
		if !strings.Contains(log.String(), w) {
			t.Errorf("log lacks %q:\n%s", w, log.String())
		}
	}
}

func TestUploadRetries503(t *testing.T) {
	f := newFakeS3(t)
	p := filepath.Join(t.TempDir(), "out.bin")
	if err := os.WriteFile(p, []byte("payload"), 0o644); err != nil {
		t.Fatal(err)
	}
	failing := firstRequests(2, http.MethodPut, "")
	f.fail = func(r *http.Request) int {
		if failing(r) {
			return http.StatusServiceUnavailable
		}
		return 0
	}
	run := Run{Bucket: bucket, JobID: "j", JobUID: "u"}
	if err := f.stager(&bytes.Buffer{}).Upload(context.Background(), run, []string{p}); err != nil {
		t.Fatal(err)
	}
	key := "results/j/u" + p
	if got := f.Get(key); got != "payload" {
		t.Errorf("got %q", got)
	}
	if n := f.count("PUT", key); n != 3 {
		t.Errorf("PUTs = %d; want 3", n)
	}
}

func TestDeletePrefixKeepsSiblings(t *testing.T) {
	f := newFakeS3(t)
	for i := range 30 {
		f.Put(fmt.Sprintf("results/job/uid-1/out/%02d", i), "0123456789")
	}
	f.Put("results/job/uid-10/x", "sibling run whose UID starts the same")
	f.Put("results/job/uid-2/x", "another run")
	f.Put("results/job-2/uid-1/x", "another job")
	rm, err := DeletePrefix(context.Background(), f.Client, bucket, "results/job/uid-1/")
	if err != nil {
		t.Fatal(err)
	}
	if rm.Objects != 30 || rm.Bytes != 300 {
		t.Errorf("removed %+v", rm)
	}
	want := []string{"results/job-2/uid-1/x", "results/job/uid-10/x", "results/job/uid-2/x"}
	if got := f.Keys("results/"); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("left %v", got)
	}
	if _, err := DeletePrefix(context.Background(), f.Client, bucket, "results/job/uid-1"); err == nil {
		t.Error("a prefix without a trailing / was accepted")
	}
	rm, err = DeletePrefix(context.Background(), f.Client, bucket, "results/none/x/")
	if err != nil || rm.Objects != 0 {
		t.Errorf("empty prefix: %+v, %v", rm, err)
	}
}

func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code exitcode.Code
		want string
	}{
		{minio.ErrorResponse{StatusCode: 403, Code: "SignatureDoesNotMatch"}, exitcode.Forbidden, "S3 rejected the credentials (SignatureDoesNotMatch): check ACCESS_KEY and SECRET_KEY"},
		{minio.ErrorResponse{StatusCode: 403, Code: "InvalidAccessKeyId"}, exitcode.Forbidden, "rejected the credentials (InvalidAccessKeyId)"},
		{minio.ErrorResponse{StatusCode: 403, Code: "AccessDenied"}, exitcode.Forbidden, "s3://b/k: access denied (403 AccessDenied)"},
		{minio.ErrorResponse{StatusCode: 404, Code: "NoSuchKey"}, exitcode.NotFound, "s3://b/k: no such object (404 NoSuchKey)"},
		{minio.ErrorResponse{StatusCode: 404, Code: "NoSuchBucket"}, exitcode.NotFound, "the bucket does not exist"},
		{minio.ErrorResponse{StatusCode: 404}, exitcode.NotFound, "(404 NotFound)"},
		{errors.New("dial tcp: connection refused"), exitcode.Error, "get s3://b/k: dial tcp"},
		// An S3 server that refuses the connection is not the API server (exitcode.Explain).
		{&url.Error{Op: "Get", URL: "http://10.0.0.1:9000/b/k", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}},
			exitcode.Error, `get s3://b/k: Get "http://10.0.0.1:9000/b/k": dial tcp: connection refused`},
		{exitcode.Usagef("already explained"), exitcode.Usage, "already explained"},
	} {
		err := exitcode.Explain(Describe(tc.err, "get", "s3://b/k"))
		if exitcode.Of(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Describe(%v) = %v (code %d); want %q, code %d", tc.err, err, exitcode.Of(err), tc.want, tc.code)
		}
	}
}

func TestTransient(t *testing.T) {
	for err, want := range map[error]bool{
		minio.ErrorResponse{StatusCode: 503}:                       true,
		minio.ErrorResponse{StatusCode: 500}:                       true,
		minio.ErrorResponse{StatusCode: 429}:                       true,
		minio.ErrorResponse{StatusCode: 404, Code: "NoSuchKey"}:    false,
		minio.ErrorResponse{StatusCode: 403, Code: "AccessDenied"}: false,
		fmt.Errorf("x: %w", errIdle):                               true,
		errors.New("local disk full"):                              false,
	} {
		if got := Transient(err); got != want {
			t.Errorf("Transient(%v) = %v", err, got)
		}
	}
}

func TestConfigAndEndpoint(t *testing.T) {
	for ep, want := range map[string]string{
		"":                        "s3.amazonaws.com true",
		"http://127.0.0.1:7070":   "127.0.0.1:7070 false",
		"https://s3.example.com/": "s3.example.com true",
		"minio.local:9000":        "minio.local:9000 true",
		"ftp://x":                 "error",
		"http://u:p@host":         "error",
		"http://host/bucket":      "error",
		"https://":                "error",
		// Found by FuzzParseEndpoint: accepted as host "%0", which minio-go then refuses.
		"%250":                      "error",
		"http://[fe80::1%25en0]:90": "error",
	} {
		host, secure, err := ParseEndpoint(ep)
		got := fmt.Sprintf("%s %v", host, secure)
		if err != nil {
			got = "error"
		}
		if got != want {
			t.Errorf("ParseEndpoint(%q) = %q (%v); want %q", ep, got, err, want)
		}
	}
	// Found by FuzzParseEndpoint: the errors quoted the URL, password and all.
	for _, ep := range []string{"ftp://u:hunter2@host", "https://u:hunter2@host%zz", "https://u:hunter2@host/path"} {
		if _, _, err := ParseEndpoint(ep); err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("ParseEndpoint(%q) = %v; want an error without the password", ep, err)
		}
	}
	c := ConfigFromEnv(func(k string) string { return map[string]string{"SECRET_KEY": "s3cr3t"}[k] })
	err := c.Check(true, "the environment")
	if err == nil || err.Error() != "S3 credentials incomplete: ACCESS_KEY, S3_BUCKET_NAME not set in the environment" || exitcode.Of(err) != exitcode.Usage {
		t.Errorf("Check = %v", err)
	}
	if strings.Contains(c.String(), "s3cr3t") {
		t.Error("Config.String shows the secret")
	}
	c = ConfigFromSecretData(map[string][]byte{"ACCESS_KEY": []byte("a"), "SECRET_KEY": []byte("s"), "S3_BUCKET_NAME": []byte("Bad_Bucket")})
	if err := c.Check(true, "secret/x"); err == nil || !strings.Contains(err.Error(), "S3_BUCKET_NAME from secret/x") {
		t.Errorf("Check = %v", err)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q; want %q", n, got, want)
		}
	}
}

// An object over the bound is refused with its URL; one at the bound is read whole.
func TestGetBounded(t *testing.T) {
	f := newFakeS3(t)
	body := strings.Repeat("m", 1000)
	f.Put("results/j/u/manifest.json", body)
	ctx := context.Background()
	if got, err := GetBounded(ctx, f.Client, bucket, "results/j/u/manifest.json", 1000); err != nil || string(got) != body {
		t.Fatalf("at the bound: %d bytes, %v", len(got), err)
	}
	got, err := GetBounded(ctx, f.Client, bucket, "results/j/u/manifest.json", 999)
	if err == nil || got != nil || !strings.Contains(err.Error(), "s3://"+bucket+"/results/j/u/manifest.json is 1000 B, larger than the 999 B read into memory at most") {
		t.Fatalf("over the bound: %d bytes, %v", len(got), err)
	}
	if got, err := Get(ctx, f.Client, bucket, "results/j/u/manifest.json"); err != nil || string(got) != body {
		t.Fatalf("Get: %d bytes, %v", len(got), err)
	}
	if _, err := Get(ctx, f.Client, bucket, "results/j/u/none"); minio.ToErrorResponse(err).Code != "NoSuchKey" {
		t.Fatalf("a missing object: %v", err)
	}
}

// Open streams an object; a missing one, and a body that breaks while read, are named.
func TestOpenStreamsAndNamesErrors(t *testing.T) {
	f := newFakeS3(t)
	body := strings.Repeat("log line\n", 50_000)
	f.Put("logs/rank-0.log", body)
	ctx := context.Background()
	rc, err := Open(ctx, f.Client, bucket, "logs/rank-0.log", "reading")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil || string(got) != body {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	if _, err := Open(ctx, f.Client, bucket, "logs/none.log", "reading"); exitcode.Of(err) != exitcode.NotFound ||
		!strings.Contains(err.Error(), "reading s3://"+bucket+"/logs/none.log: no such object") {
		t.Fatalf("missing: %v", err)
	}
	f.truncate = firstRequests(1, http.MethodGet, "/"+bucket+"/logs/rank-0.log")
	rc, err = Open(ctx, f.Client, bucket, "logs/rank-0.log", "reading")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadAll(rc); err == nil || !strings.Contains(err.Error(), "reading s3://"+bucket+"/logs/rank-0.log") {
		t.Fatalf("broken body: %v", err)
	}
}
