package s3

import (
	"context"
	"crypto/md5" // S3's ETag of a single-part object is the MD5 of its bytes: a checksum, not security
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

// partPrefix starts the names of the temporary files a tree download writes next to their
// destinations; they are renamed into place only once complete.
const partPrefix = ".tao-part-"

// Tree is a set of listed objects to download into a local directory, each to its key
// relative to Prefix.
type Tree struct {
	Bucket string
	// Prefix is stripped from each key to make its path below Dir; it ends in "/".
	Prefix  string
	Objects []Object
	Dir     string
	// Progress, when set, is told of each object (its size, and whether it was skipped) and of
	// each chunk of bytes written; it is called from several goroutines.
	Progress TreeProgress
}

// TreeProgress follows a tree download (a progress bar on a terminal).
type TreeProgress interface {
	// Bytes reports n more bytes written (or, for a skipped file, found complete).
	Bytes(n int64)
	// Object reports one object done.
	Object()
}

// Fetched is what a tree download did.
type Fetched struct {
	// Downloaded objects and their bytes.
	Downloaded int   `json:"downloaded"`
	Bytes      int64 `json:"bytes"`
	// Skipped objects were already complete in the directory (same size and checksum).
	Skipped int `json:"skipped"`
}

// treeFile is one object and the local path it goes to.
type treeFile struct {
	obj  Object
	rel  string // slash path below Dir
	dest string
}

// planTree maps each object to its path below dir, refusing (before anything is written) any
// key that would land outside dir: "..", "." or empty segments, a leading "/", a backslash.
// Directory markers (keys ending in "/") are left out: directories are made as needed.
func planTree(prefix string, objs []Object, dir string) ([]treeFile, error) {
	var files []treeFile
	var refused []string
	for _, o := range objs {
		rel, ok := strings.CutPrefix(o.Key, prefix)
		if !ok {
			refused = append(refused, o.Key)
			continue
		}
		if rel == "" || strings.HasSuffix(rel, "/") {
			continue
		}
		if !localPath(rel) {
			refused = append(refused, o.Key)
			continue
		}
		files = append(files, treeFile{obj: o, rel: rel, dest: filepath.Join(dir, filepath.FromSlash(rel))})
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("refusing to download into %s: %s would land outside it (%s); nothing was written", dir, plural.N(len(refused), "key"), sample(refused))
	}
	return files, nil
}

// DownloadTree downloads t's objects below t.Dir, in parallel. Each file is written to a
// temporary name in its directory and renamed into place once complete and checked (size, and
// the MD5 a single-part ETag is), so an interrupted run never leaves a partial file under a
// final name; its modification time is set to the object's. A file already there with the
// object's size and checksum (or, for a multipart ETag, its modification time) is skipped, so
// a second run finishes a broken one and downloads nothing twice. No path through a symbolic
// link below t.Dir is written. Every object is tried; the error names those that failed.
func (s *Stager) DownloadTree(ctx context.Context, t Tree) (Fetched, error) {
	var res Fetched
	files, err := planTree(t.Prefix, t.Objects, t.Dir)
	if err != nil {
		return res, exitcode.WithCode(exitcode.Usage, err)
	}
	if err := os.MkdirAll(t.Dir, 0o755); err != nil {
		return res, err
	}
	var downloaded, skipped atomic.Int64
	var bytes atomic.Int64
	errs := s.forEach(ctx, len(files), func(ctx context.Context, i int) error {
		f := files[i]
		if err := noSymlinks(t.Dir, f.rel); err != nil {
			return err
		}
		if complete(f.dest, f.obj) {
			skipped.Add(1)
			if t.Progress != nil {
				t.Progress.Bytes(f.obj.Size)
				t.Progress.Object()
			}
			return nil
		}
		what := "s3://" + t.Bucket + "/" + f.obj.Key
		err := s.retry(ctx, what, func(ctx context.Context) error {
			return s.fetchFile(ctx, t, f)
		})
		if err != nil {
			return Describe(err, "downloading", what)
		}
		downloaded.Add(1)
		bytes.Add(f.obj.Size)
		if t.Progress != nil {
			t.Progress.Object()
		}
		return nil
	})
	res = Fetched{Downloaded: int(downloaded.Load()), Bytes: bytes.Load(), Skipped: int(skipped.Load())}
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		return res, joinCoded(failed)
	}
	return res, nil
}

// noSymlinks refuses rel when dir/rel, or a directory between dir and it, is a symbolic link:
// writing through it could land outside dir.
func noSymlinks(dir, rel string) error {
	p := dir
	for _, seg := range strings.Split(rel, "/") {
		p = filepath.Join(p, seg)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return exitcode.Usagef("refusing to write %s: %s is a symbolic link", filepath.Join(dir, filepath.FromSlash(rel)), p)
		}
	}
	return nil
}

// etagMD5 is the MD5 a single-part object's ETag is, and "" for a multipart (or encrypted)
// object's, which is no checksum of the bytes.
func etagMD5(etag string) string {
	e := strings.ToLower(strings.Trim(etag, `"`))
	if len(e) != 32 {
		return ""
	}
	if _, err := hex.DecodeString(e); err != nil {
		return ""
	}
	return e
}

// complete reports whether path already holds obj: a regular file of its size whose MD5 is its
// ETag, or, when the ETag is no MD5, whose modification time is the object's (as DownloadTree
// sets it).
func complete(path string, obj Object) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != obj.Size {
		return false
	}
	want := etagMD5(obj.ETag)
	if want == "" {
		return !obj.LastModified.IsZero() && fi.ModTime().Equal(obj.LastModified)
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	h := md5.New()
	if _, err := io.Copy(h, f); err != nil {
		return false
	}
	return hex.EncodeToString(h.Sum(nil)) == want
}

// fetchFile downloads one object to a temporary file beside f.dest and renames it into place.
func (s *Stager) fetchFile(ctx context.Context, t Tree, f treeFile) (err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(s.idleTimeout(), func() { cancel(errIdle) })
	defer timer.Stop()

	if err := os.MkdirAll(filepath.Dir(f.dest), 0o755); err != nil {
		return err
	}
	// Checked again once the directories exist: one of them may have been there as a link.
	if err := noSymlinks(t.Dir, f.rel); err != nil {
		return err
	}
	obj, err := s.Client.GetObject(ctx, t.Bucket, f.obj.Key, minio.GetObjectOptions{})
	if err != nil {
		return idleCause(ctx, err)
	}
	defer obj.Close()
	tmp, err := os.CreateTemp(filepath.Dir(f.dest), partPrefix+filepath.Base(f.dest)+"-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	sum := md5.New()
	w := io.MultiWriter(tmp, sum, progressWriter{t.Progress})
	n, err := io.Copy(w, &idleReader{r: obj, timer: timer, d: s.idleTimeout()})
	if err != nil {
		return idleCause(ctx, err)
	}
	if n != f.obj.Size {
		return fmt.Errorf("got %d of %d bytes: %w", n, f.obj.Size, io.ErrUnexpectedEOF)
	}
	if want := etagMD5(f.obj.ETag); want != "" && hex.EncodeToString(sum.Sum(nil)) != want {
		return fmt.Errorf("the downloaded bytes do not match the ETag %s: %w", f.obj.ETag, io.ErrUnexpectedEOF)
	}
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if !f.obj.LastModified.IsZero() {
		if err = os.Chtimes(tmp.Name(), f.obj.LastModified, f.obj.LastModified); err != nil {
			return err
		}
	}
	return os.Rename(tmp.Name(), f.dest)
}

// progressWriter reports the bytes written through it.
type progressWriter struct{ p TreeProgress }

func (w progressWriter) Write(b []byte) (int, error) {
	if w.p != nil {
		w.p.Bytes(int64(len(b)))
	}
	return len(b), nil
}

// ValidateGlobs checks --include patterns (path.Match syntax).
func ValidateGlobs(globs []string) error {
	for _, g := range globs {
		if _, err := path.Match(g, ""); err != nil {
			return fmt.Errorf("invalid --include %q: %w", g, err)
		}
	}
	return nil
}

// Included keeps the objects whose key relative to prefix matches one of globs (all of them
// when there is none). A pattern with a "/" matches the whole relative key ("results/*.pth"),
// one without matches its last segment at any depth ("*.log"), as users write them.
func Included(prefix string, objs []Object, globs []string) []Object {
	if len(globs) == 0 {
		return objs
	}
	var out []Object
	for _, o := range objs {
		rel := strings.TrimPrefix(o.Key, prefix)
		for _, g := range globs {
			subject := rel
			if !strings.Contains(g, "/") {
				subject = path.Base(rel)
			}
			if ok, _ := path.Match(g, subject); ok {
				out = append(out, o)
				break
			}
		}
	}
	return out
}
