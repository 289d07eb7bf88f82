package checkpoint

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/s3fake"
)

// planFile puts body as rank's file rel and returns its entry of a restore plan.
func planFile(t *testing.T, s *s3fake.Server, rank int, rel, body string, written time.Time) s3layout.RestoreFile {
	t.Helper()
	f, err := s3layout.NewManifestFile(prefix, rank, rel, int64(len(body)), written)
	if err != nil {
		t.Fatal(err)
	}
	s.Put(f.Key, body)
	return s3layout.RestoreFile{ManifestFile: f, Rank: rank}
}

// A plan of several ranks' files lands below the directory with each file's write time, a body
// that breaks on the way is fetched again, and a second fetch finds everything in place.
func TestFetchPlan(t *testing.T) {
	var mu sync.Mutex
	gets := map[string]int{}
	s := s3fake.Start(t, s3fake.Options{Wrap: func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			gets[r.Method+" "+r.URL.Path]++
			first := r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/model.safetensors") && gets[r.Method+" "+r.URL.Path] == 1
			mu.Unlock()
			if !first {
				h.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes()[:rec.Body.Len()/3])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection breaks mid-body
		})
	}})
	dir := filepath.Join(t.TempDir(), "ckpt")
	bodies := map[string]string{
		"checkpoint-5/model.safetensors":  strings.Repeat("m", 256<<10),
		"checkpoint-5/optimizer.pt":       strings.Repeat("o", 100_000),
		"checkpoint-5/trainer_state.json": `{"global_step":5}`,
		"shard-1.pt":                      "rank one's shard",
	}
	plan := []s3layout.RestoreFile{
		planFile(t, s, 0, "checkpoint-5/model.safetensors", bodies["checkpoint-5/model.safetensors"], base),
		planFile(t, s, 0, "checkpoint-5/optimizer.pt", bodies["checkpoint-5/optimizer.pt"], base.Add(time.Minute)),
		planFile(t, s, 0, "checkpoint-5/trainer_state.json", bodies["checkpoint-5/trainer_state.json"], base.Add(2*time.Minute)),
		planFile(t, s, 1, "shard-1.pt", bodies["shard-1.pt"], base.Add(3*time.Minute)),
	}
	var total int64
	for _, f := range plan {
		total += f.Size
	}
	ctx := context.Background()
	files, n, err := fetchPlan(ctx, target(s, 0, dir), plan)
	if err != nil || files != len(plan) || n != total {
		t.Fatalf("fetchPlan = %d files, %d bytes, %v; want %d, %d", files, n, err, len(plan), total)
	}
	for _, f := range plan {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		got, err := os.ReadFile(p)
		if err != nil || string(got) != bodies[f.Path] {
			t.Errorf("%s: %d bytes, %v", f.Path, len(got), err)
		}
		if fi, err := os.Stat(p); err != nil || !fi.ModTime().Equal(f.Written) {
			t.Errorf("%s: modified %v, want the write time %v", f.Path, fi.ModTime(), f.Written)
		}
	}
	requests := func() (model, all int) {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range gets {
			all += n
		}
		return gets["GET /"+s.Bucket+"/"+plan[0].Key], all
	}
	model, all := requests()
	if model != 2 {
		t.Errorf("%s: %d GETs, want a broken one and a whole one", plan[0].Key, model)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "checkpoint-5"))
	if len(entries) != 3 {
		t.Errorf("checkpoint-5 holds %d entries, want its 3 files and no part file", len(entries))
	}

	// Again: every file is whole and in place; nothing is fetched.
	files, n, err = fetchPlan(ctx, target(s, 0, dir), plan)
	if _, again := requests(); err != nil || files != len(plan) || n != total || again != all {
		t.Errorf("second fetch = %d files, %d bytes, %v; %d requests", files, n, err, again-all)
	}
}

// A missing object and one of another size than its manifest says are each named with their
// URL; the other files still land.
func TestFetchPlanErrors(t *testing.T) {
	s := s3fake.Start(t, s3fake.Options{})
	dir := t.TempDir()
	good := planFile(t, s, 0, "a.pt", "whole", base)
	missing := planFile(t, s, 0, "b.pt", "gone", base)
	if err := s.Client.RemoveObject(context.Background(), s.Bucket, missing.Key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	short := planFile(t, s, 1, "c.pt", "abc", base)
	short.Size = 4
	_, _, err := fetchPlan(context.Background(), target(s, 0, dir), []s3layout.RestoreFile{good, missing, short})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"checkpoint restore: downloading s3://" + s.Bucket + "/" + missing.Key + ": no such object",
		"checkpoint restore: downloading s3://" + s.Bucket + "/" + short.Key + ": it is 3 bytes, not the 4 expected",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if exitcode.Of(err) != exitcode.NotFound {
		t.Errorf("exit code %d, want NotFound's", exitcode.Of(err))
	}
	if got, err := os.ReadFile(filepath.Join(dir, "a.pt")); err != nil || string(got) != "whole" {
		t.Errorf("a.pt: %q, %v", got, err)
	}
	for _, p := range []string{"b.pt", "c.pt"} {
		if _, err := os.Stat(filepath.Join(dir, p)); !os.IsNotExist(err) {
			t.Errorf("%s: %v, want nothing", p, err)
		}
	}
}
