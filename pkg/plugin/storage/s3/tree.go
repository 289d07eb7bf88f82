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

// IsPart reports whether a file's base name is one of a download's temporary files, which a
// broken download may leave behind: never a file of its own (an uploader passes it by).
func IsPart(name string) bool { return strings.HasPrefix(name, partPrefix) }

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

// File is one object to download to a path below a directory: what Files downloads.
type File struct {
	Key string
	// Path is the file's slash path below the directory.
	Path string
	// Size is the object's size in bytes; a download of any other size fails.
	Size int64
	// ETag is the object's as listed; when it is empty, the ETag of the download's answer is
	// checked instead. A single-part ETag is the MD5 the downloaded bytes must have.
	ETag string
	// ModTime is set on the file once complete (zero leaves the time of the download); with no
	// MD5 to compare, a file already there counts as complete when its time is this one.
	ModTime time.Time
}

// Files is a set of objects to download below Dir, each to its own path.
type Files struct {
	Bucket string
	Files  []File
	Dir    string
	// Op starts the error of a failed object, before its s3:// URL ("downloading" when empty).
	Op string
	// Progress, when set, is told of each object (its size, and whether it was skipped) and of
	// each chunk of bytes written; it is called from several goroutines.
	Progress TreeProgress
}

// treeFile is one file and the local path it goes to.
type treeFile struct {
	File
	dest string
}

// planTree maps each object to its path below dir (see planFiles), refusing keys outside
// prefix. Directory markers (keys ending in "/") are left out: directories are made as needed.
func planTree(prefix string, objs []Object, dir string) ([]treeFile, error) {
	var files []File
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
		files = append(files, File{Key: o.Key, Path: rel, Size: o.Size, ETag: o.ETag, ModTime: o.LastModified})
	}
	if len(refused) > 0 {
		return nil, refuseOutside(dir, refused)
	}
	return planFiles(files, dir)
}

// planFiles maps each file to its path below dir, refusing (before anything is written) any
// path that would land outside dir: "..", "." or empty segments, a leading "/", a backslash.
func planFiles(files []File, dir string) ([]treeFile, error) {
	out := make([]treeFile, 0, len(files))
	var refused []string
	for _, f := range files {
		if !localPath(f.Path) {
			refused = append(refused, f.Key)
			continue
		}
		out = append(out, treeFile{File: f, dest: filepath.Join(dir, filepath.FromSlash(f.Path))})
	}
	if len(refused) > 0 {
		return nil, refuseOutside(dir, refused)
	}
	return out, nil
}

func refuseOutside(dir string, keys []string) error {
	return fmt.Errorf("refusing to download into %s: %s would land outside it (%s); nothing was written", dir, plural.N(len(keys), "key"), sample(keys))
}

// DownloadTree downloads t's objects below t.Dir, each to its key relative to t.Prefix, with
// its modification time set to the object's: DownloadFiles does the work.
func (s *Stager) DownloadTree(ctx context.Context, t Tree) (Fetched, error) {
	files, err := planTree(t.Prefix, t.Objects, t.Dir)
	if err != nil {
		return Fetched{}, exitcode.WithCode(exitcode.Usage, err)
	}
	return s.downloadFiles(ctx, Files{Bucket: t.Bucket, Dir: t.Dir, Progress: t.Progress}, files)
}

// DownloadFiles downloads fl's files below fl.Dir, in parallel. Each file is written to a
// temporary name in its directory and renamed into place once complete and checked (size, and
// the MD5 a single-part ETag is), so an interrupted run never leaves a partial file under a
// final name; a transfer that fails on the way or stalls for the idle timeout is tried again.
// A file already there with the object's size and checksum (or, without one, its modification
// time) is skipped, so a second run finishes a broken one and downloads nothing twice. No path
// through a symbolic link below fl.Dir is written. Every file is tried; the error names those
// that failed.
func (s *Stager) DownloadFiles(ctx context.Context, fl Files) (Fetched, error) {
	files, err := planFiles(fl.Files, fl.Dir)
	if err != nil {
		return Fetched{}, exitcode.WithCode(exitcode.Usage, err)
	}
	return s.downloadFiles(ctx, fl, files)
}

func (s *Stager) downloadFiles(ctx context.Context, fl Files, files []treeFile) (Fetched, error) {
	var res Fetched
	if err := os.MkdirAll(fl.Dir, 0o755); err != nil {
		return res, err
	}
	op := fl.Op
	if op == "" {
		op = "downloading"
	}
	var downloaded, skipped atomic.Int64
	var bytes atomic.Int64
	errs := s.forEach(ctx, len(files), func(ctx context.Context, i int) error {
		f := files[i]
		if err := noSymlinks(fl.Dir, f.Path); err != nil {
			return err
		}
		if complete(f.dest, f.File) {
			skipped.Add(1)
			if fl.Progress != nil {
				fl.Progress.Bytes(f.Size)
				fl.Progress.Object()
			}
			return nil
		}
		what := "s3://" + fl.Bucket + "/" + f.Key
		err := s.retry(ctx, what, func(ctx context.Context) error {
			return s.fetchFile(ctx, fl, f)
		})
		if err != nil {
			return Describe(err, op, what)
		}
		downloaded.Add(1)
		bytes.Add(f.Size)
		if fl.Progress != nil {
			fl.Progress.Object()
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

// complete reports whether path already holds f: a regular file of its size whose MD5 is its
// ETag, or, when the ETag is no MD5, whose modification time is f's (as DownloadFiles sets it).
func complete(path string, f File) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != f.Size {
		return false
	}
	want := etagMD5(f.ETag)
	if want == "" {
		return !f.ModTime.IsZero() && fi.ModTime().Equal(f.ModTime)
	}
	r, err := os.Open(path)
	if err != nil {
		return false
	}
	defer r.Close()
	h := md5.New()
	if _, err := io.Copy(h, r); err != nil {
		return false
	}
	return hex.EncodeToString(h.Sum(nil)) == want
}

// errChanged is the cause of a download whose object is not the one expected: trying again
// cannot help.
var errChanged = errors.New("the object changed")

// fetchFile downloads one object to a temporary file beside f.dest and renames it into place.
func (s *Stager) fetchFile(ctx context.Context, fl Files, f treeFile) (err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(s.idleTimeout(), func() { cancel(errIdle) })
	defer timer.Stop()

	if err := os.MkdirAll(filepath.Dir(f.dest), 0o755); err != nil {
		return err
	}
	// Checked again once the directories exist: one of them may have been there as a link.
	if err := noSymlinks(fl.Dir, f.Path); err != nil {
		return err
	}
	// One GET whose answer carries the object's size and ETag before its body is read.
	body, info, _, err := minio.Core{Client: s.Client}.GetObject(ctx, fl.Bucket, f.Key, minio.GetObjectOptions{})
	if err != nil {
		return idleCause(ctx, err)
	}
	defer body.Close()
	if info.Size != f.Size {
		return fmt.Errorf("it is %d bytes, not the %d expected: %w", info.Size, f.Size, errChanged)
	}
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
	w := io.MultiWriter(tmp, sum, progressWriter{fl.Progress})
	n, err := io.Copy(w, &idleReader{r: body, timer: timer, d: s.idleTimeout()})
	if err != nil {
		return idleCause(ctx, err)
	}
	if n != f.Size {
		return fmt.Errorf("got %d of %d bytes: %w", n, f.Size, io.ErrUnexpectedEOF)
	}
	etag := f.ETag
	if etag == "" {
		etag = info.ETag
	}
	if want := etagMD5(etag); want != "" && hex.EncodeToString(sum.Sum(nil)) != want {
		return fmt.Errorf("the downloaded bytes do not match the ETag %s: %w", etag, io.ErrUnexpectedEOF)
	}
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if !f.ModTime.IsZero() {
		if err = os.Chtimes(tmp.Name(), f.ModTime, f.ModTime); err != nil {
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
