// Command s3bench measures kubectl-tao's own S3 transfers against the tools a user would reach
// for instead, side by side in one run against a local S3 server (versitygw on loopback,
// test/s3server):
//
//   - `submit --workdir DIR` (scan, pack into a tar.zst, upload while the Job is suspended)
//     against `tar -c DIR | zstd > FILE` followed by `rclone copy FILE`;
//   - `results JOB --download DIR` of 1,000 objects of 1 MiB against `rclone copy` of the same
//     prefix;
//   - a --checkpoint-dir checkpoint unit (a directory of 20 files, 2 GiB) uploaded and restored
//     by the wrapper's `stage run` against `rclone copy` of the directory up and down.
//
// Both kubectl-tao commands run as the real binary, start-up included. They need a Kubernetes
// API server only for a few small requests (submit: create the Job and its Secret, resume the
// Job; results: look the Job up), which a stub in this process answers on loopback, so the
// figures are the S3 side's and the benchmark needs no cluster. Every command's result is
// checked (the object uploaded, every file downloaded whole); durations are reported, never
// asserted. `make bench-s3` runs it (and `make bench`).
package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/kubectl-tao/kubectl-tao/test/bench/benchutil"
	"github.com/kubectl-tao/kubectl-tao/test/s3server"
)

// rcloneVersion is the release the issues compare with, built from the module proxy:
// `go install github.com/rclone/rclone@v1.76.0`.
const rcloneVersion = "v1.76.0"

const (
	bucket    = "bench"
	namespace = "bench"
)

func main() {
	tools := benchutil.ToolFlags(3, "runs of each command")
	rclone := flag.String("rclone", defaultRclone(), "the rclone "+rcloneVersion+" binary (go install github.com/rclone/rclone@"+rcloneVersion+"); \"\" leaves rclone's rows out")
	files := flag.Int("files", 5000, "files in the --workdir tree")
	treeMiB := flag.Int("tree-mib", 100, "size of the --workdir tree in MiB")
	objects := flag.Int("objects", 1000, "objects of the results download")
	objectKiB := flag.Int("object-kib", 1024, "size of each downloaded object in KiB")
	checkpointMiB := flag.Int("checkpoint-mib", 2048, "size of the --checkpoint-dir checkpoint unit in MiB")
	checkpointFiles := flag.Int("checkpoint-files", 20, "files of the --checkpoint-dir checkpoint unit (one directory)")
	benchutil.Main(func() error {
		return run(tools.Runs, tools.Tao, *rclone, *files, *treeMiB, *objects, *objectKiB, *checkpointMiB, *checkpointFiles)
	})
}

// defaultRclone is where the Makefile's rclone target installs it.
func defaultRclone() string {
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(cache, "kubectl-tao", "tools", "rclone-"+rcloneVersion, "rclone")
}

func run(runs int, tao, rclone string, files, treeMiB, objects, objectKiB, checkpointMiB, checkpointFiles int) error {
	if rclone != "" {
		if _, err := os.Stat(rclone); err != nil {
			return fmt.Errorf("rclone %s not found at %s (make rclone, or -rclone \"\" to leave it out): %w", rcloneVersion, rclone, err)
		}
	}
	tmp, err := os.MkdirTemp("", "s3bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.Mkdir(filepath.Join(tmp, "s3"), 0o755); err != nil {
		return err
	}
	srv, stop, err := s3server.Run("127.0.0.1", filepath.Join(tmp, "s3"))
	if err != nil {
		return err
	}
	defer stop()
	ctx := context.Background()
	if err := srv.Client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		return err
	}
	api := httptest.NewServer(newStub())
	defer api.Close()
	kubeconfig := filepath.Join(tmp, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(kubeconfigTemplate, api.URL, namespace)), 0o600); err != nil {
		return err
	}
	// Credentials in the environment only: kubectl-tao's variables, and an rclone remote
	// "bench" defined by rclone's own (no config file: RCLONE_CONFIG names none that exists).
	env := []string{
		"KUBECONFIG=" + kubeconfig, "XDG_CONFIG_HOME=" + filepath.Join(tmp, "no-config"),
		"ACCESS_KEY=" + srv.AccessKey, "SECRET_KEY=" + srv.SecretKey, "S3_BUCKET_NAME=" + bucket, "S3_ENDPOINT_URL=" + srv.Endpoint,
		"RCLONE_CONFIG=" + filepath.Join(tmp, "no-rclone.conf"),
		"RCLONE_CONFIG_BENCH_TYPE=s3", "RCLONE_CONFIG_BENCH_PROVIDER=Other", "RCLONE_CONFIG_BENCH_ENDPOINT=" + srv.Endpoint,
		"RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=" + srv.AccessKey, "RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=" + srv.SecretKey,
		"RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE=true", "RCLONE_CONFIG_BENCH_REGION=us-east-1",
	}

	tree := filepath.Join(tmp, "tree")
	size, err := writeTree(tree, files, int64(treeMiB)<<20)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "s3bench: wrote a tree of %d files, %d bytes\n", files, size)
	if err := putObjects(ctx, srv.Client, "results/dl/uid-1/", objects, objectKiB<<10); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "s3bench: put %d objects of %d KiB\n", objects, objectKiB)
	if err := warmUp(env, tao, rclone); err != nil {
		return err
	}

	loadBefore := benchutil.LoadAverage()
	var packTao, packOnly, packTar, dlTao, dlRclone []benchutil.Sample
	for i := range runs {
		// --workdir: the plugin's submit against tar | zstd, then rclone copy of the archive.
		job := fmt.Sprintf("wd-%d", i)
		s, err := benchutil.Measure(env, tao, "submit", job, "--image", "busybox", "--gpus", "0", "--no-capacity-check",
			"--stager-image", "registry.invalid/kubectl-tao:bench", "--workdir", tree, "--workdir-max-size", "1Gi", "--", "true")
		if err != nil {
			return err
		}
		if err := checkObject(ctx, srv.Client, "results/"+job+"/"+stubUID(job)+"/.kubectl-tao/workdir.tar.zst"); err != nil {
			return err
		}
		packTao = append(packTao, s)
		// Packing alone, the pipeline's first half: the floor any upload adds to.
		archive := filepath.Join(tmp, fmt.Sprintf("tree-%d.tar.zst", i))
		s, err = benchutil.Measure(env, "sh", "-c", `tar -C "$1" -cf - . | zstd -q -o "$2"`, "sh", tree, archive)
		if err != nil {
			return err
		}
		os.Remove(archive)
		packOnly = append(packOnly, s)
		if rclone != "" {
			dest := fmt.Sprintf("bench:%s/tar/%d/", bucket, i)
			script := `tar -C "$1" -cf - . | zstd -q -o "$2" && "$3" copy "$2" "$4"`
			s, err := benchutil.Measure(env, "sh", "-c", script, "sh", tree, archive, rclone, dest)
			if err != nil {
				return err
			}
			if err := checkObject(ctx, srv.Client, fmt.Sprintf("tar/%d/%s", i, filepath.Base(archive))); err != nil {
				return err
			}
			os.Remove(archive)
			packTar = append(packTar, s)
		}

		// results --download against rclone copy of the same prefix, each into a fresh directory
		// that is checked, then removed.
		download := func(into *[]benchutil.Sample, dir, name string, args ...string) error {
			s, err := benchutil.Measure(env, name, append(args, dir)...)
			if err == nil {
				err = checkDir(dir, objects, int64(objectKiB)<<10)
			}
			if err != nil {
				return fmt.Errorf("%s %s: %w", name, args[0], err)
			}
			*into = append(*into, s)
			return os.RemoveAll(dir)
		}
		if err := download(&dlTao, filepath.Join(tmp, fmt.Sprintf("dl-tao-%d", i)), tao, "results", "dl", "--uid", "uid-1", "--download"); err != nil {
			return err
		}
		if rclone != "" {
			if err := download(&dlRclone, filepath.Join(tmp, fmt.Sprintf("dl-rclone-%d", i)), rclone, "copy", "bench:"+bucket+"/results/dl/uid-1"); err != nil {
				return err
			}
		}
	}
	loadAfter := benchutil.LoadAverage()

	benchutil.PrintSetting(loadBefore, loadAfter)
	fmt.Printf("--workdir: a tree of %d files, %.1f MiB, packed and uploaded (%d runs each)\n", files, float64(size)/(1<<20), runs)
	benchutil.Header()
	benchutil.Row("kubectl-tao submit --workdir DIR (scan, pack, upload, Job)", benchutil.Median(packTao))
	benchutil.Row("tar -c DIR | zstd > F (packing alone, no upload)", benchutil.Median(packOnly))
	if rclone != "" {
		benchutil.Row("tar -c DIR | zstd > F; rclone copy F", benchutil.Median(packTar))
		ratio("ratio kubectl-tao / tar | zstd + rclone", benchutil.Median(packTao), benchutil.Median(packTar))
	}
	fmt.Printf("\nresults --download: %d objects of %d KiB (%d runs each)\n", objects, objectKiB, runs)
	benchutil.Header()
	benchutil.Row("kubectl-tao results JOB --uid UID --download DIR", benchutil.Median(dlTao))
	if rclone != "" {
		benchutil.Row("rclone copy REMOTE:BUCKET/PREFIX DIR", benchutil.Median(dlRclone))
		ratio("ratio kubectl-tao / rclone", benchutil.Median(dlTao), benchutil.Median(dlRclone))
	}
	return checkpointBench(ctx, srv.Client, env, tao, rclone, tmp, runs, checkpointMiB, checkpointFiles)
}

func ratio(what string, a, b benchutil.Summary) {
	fmt.Printf("  %-62s %8.3fx %8.3fx\n", what, a.Wall.Seconds()/b.Wall.Seconds(), a.CPU.Seconds()/b.CPU.Seconds())
}

// warmUp runs each binary once, untimed, so that the first timed run does not pay for reading
// it from disk.
func warmUp(env []string, tao, rclone string) error {
	if _, err := benchutil.Measure(env, tao, "version"); err != nil {
		return err
	}
	if rclone == "" {
		return nil
	}
	s, err := benchutil.Measure(env, rclone, "version")
	if err == nil && !bytes.Contains(s.Out, []byte("rclone "+rcloneVersion)) {
		err = fmt.Errorf("%s is not rclone %s: %s", rclone, rcloneVersion, s.Out)
	}
	return err
}

// writeTree writes a training project of n files and about total bytes: four large files
// (two incompressible, like weights; two of CSV text) of half the total, and n-4 small source
// and text files in 50 directories sharing the rest. The content is pseudo-random with a
// fixed seed: every run of the benchmark packs the same tree.
func writeTree(root string, n int, total int64) (int64, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	var written int64
	write := func(name string, data []byte) error {
		full := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		written += int64(len(data))
		return os.WriteFile(full, data, 0o644)
	}
	large := total / 8
	for i := range 2 {
		data := make([]byte, large)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		if err := write(fmt.Sprintf("checkpoints/init-%d.bin", i), data); err != nil {
			return 0, err
		}
		if err := write(fmt.Sprintf("data/table-%d.csv", i), text(rng, int(large), true)); err != nil {
			return 0, err
		}
	}
	small := max(1, n-4)
	each := int((total - written) / int64(small))
	for i := range small {
		size := each/2 + rng.IntN(each+1) // between half and one and a half times the mean
		if err := write(fmt.Sprintf("src/pkg%02d/module_%04d.py", i%50, i), text(rng, size, false)); err != nil {
			return 0, err
		}
	}
	return written, nil
}

// text is n bytes of source-like lines (or CSV rows): words from a small vocabulary, which
// compresses about as well as real code.
func text(rng *rand.Rand, n int, csv bool) []byte {
	words := []string{"def", "return", "self", "import", "torch", "model", "loss", "batch", "for", "in", "range",
		"optimizer", "step", "if", "else", "x", "y", "=", "(", ")", ":", "lr", "epoch", "data", "0.001", "None"}
	var b bytes.Buffer
	for b.Len() < n {
		if csv {
			fmt.Fprintf(&b, "%d,%d,%.4f,%s\n", rng.IntN(100000), rng.IntN(1000), rng.Float64(), words[rng.IntN(len(words))])
			continue
		}
		for w := rng.IntN(8) + 2; w > 0; w-- {
			b.WriteString(words[rng.IntN(len(words))])
			b.WriteByte(' ')
		}
		b.WriteByte('\n')
	}
	return b.Bytes()[:n]
}

// putObjects stores n objects of size random bytes under prefix, 16 at a time.
func putObjects(ctx context.Context, c *minio.Client, prefix string, n, size int) error {
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				rng := rand.New(rand.NewPCG(uint64(i), 3))
				data := make([]byte, size)
				for j := range data {
					data[j] = byte(rng.Uint32())
				}
				key := fmt.Sprintf("%sckpt/%02d/shard-%04d.bin", prefix, i%20, i)
				if _, err := c.PutObject(ctx, bucket, key, bytes.NewReader(data), int64(size), minio.PutObjectOptions{}); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs // nil when the channel is empty
}

// checkObject fails unless key exists and is not empty.
func checkObject(ctx context.Context, c *minio.Client, key string) error {
	info, err := c.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return fmt.Errorf("s3://%s/%s: %w", bucket, key, err)
	}
	if info.Size == 0 {
		return fmt.Errorf("s3://%s/%s is empty", bucket, key)
	}
	return nil
}

// checkDir fails unless dir holds exactly n regular files of size bytes, each the object it
// was downloaded from (its MD5 is the content's: the name says which seed wrote it).
func checkDir(dir string, n int, size int64) error {
	count := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() != size {
			return fmt.Errorf("%s: %d bytes, want %d", p, info.Size(), size)
		}
		var i int
		if _, err := fmt.Sscanf(filepath.Base(p), "shard-%04d.bin", &i); err != nil {
			return fmt.Errorf("%s: unexpected file", p)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := md5.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		rng := rand.New(rand.NewPCG(uint64(i), 3))
		want := md5.New()
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		want.Write(data)
		if !bytes.Equal(h.Sum(nil), want.Sum(nil)) {
			return fmt.Errorf("%s: content differs (md5 %s)", p, hex.EncodeToString(h.Sum(nil)))
		}
		count++
		return nil
	})
	if err == nil && count != n {
		err = fmt.Errorf("%s holds %d files, want %d", dir, count, n)
	}
	return err
}

const kubeconfigTemplate = `apiVersion: v1
kind: Config
clusters:
- name: stub
  cluster:
    server: %s
contexts:
- name: stub
  context:
    cluster: stub
    user: stub
    namespace: %s
users:
- name: stub
  user: {}
current-context: stub
`

// stubUID is the UID the stub gives the object named name: known in advance, so that the
// benchmark knows where submit uploads the archive.
func stubUID(name string) string {
	sum := md5.Sum([]byte(name))
	h := hex.EncodeToString(sum[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// stub is the least of an API server that submit and results need: it stores what is created
// (protobuf or JSON, answered in JSON), returns it on get and patch, and says 404 otherwise.
// A submit's rollback deletes are answered with success.
type stub struct {
	mu      sync.Mutex
	objects map[string][]byte // path of the object -> its JSON
}

func newStub() *stub { return &stub{objects: map[string][]byte{}} }

func (s *stub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Method {
	case http.MethodPost:
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		m.SetUID(types.UID(stubUID(m.GetName())))
		m.SetResourceVersion("1")
		obj.GetObjectKind().SetGroupVersionKind(*gvk)
		out, _ := json.Marshal(obj)
		s.objects[r.URL.Path+"/"+m.GetName()] = out
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(out)
	case http.MethodGet, http.MethodPatch:
		if out, ok := s.objects[r.URL.Path]; ok {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(out)
			return
		}
		notFound(w, r.URL.Path)
	case http.MethodDelete:
		delete(s.objects, r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Success"}`))
	default:
		notFound(w, r.URL.Path)
	}
}

func notFound(w http.ResponseWriter, path string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	resource, name := "", ""
	if len(parts) >= 2 {
		resource, name = parts[len(parts)-2], parts[len(parts)-1]
	}
	st := apierrors.NewNotFound(schema.GroupResource{Resource: resource}, name).ErrStatus
	st.Kind, st.APIVersion = "Status", "v1"
	out, _ := json.Marshal(st)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	_, _ = w.Write(out)
}
