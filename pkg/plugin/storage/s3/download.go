package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

// tempPrefix starts the names of the temporary files and directories downloads write to; they
// are hidden and never have a destination's name, so a failed run leaves nothing at one.
const tempPrefix = ".tao-stage-"

// download is one object to fetch into a staging area.
type download struct {
	input int // index into the inputs
	src   s3layout.URL
	dest  string // path of the file inside the input's staging area
	final string // where the file ends up, for the log
}

// plan is one input prepared for download: where its objects go first, and how it is put in
// place at the end.
type plan struct {
	in s3layout.Input
	// stage is the temporary file or directory the objects are written into.
	stage string
	// into is true when stage is a directory inside an existing destination directory whose
	// entries are moved into it (a mount point cannot be replaced by a rename).
	into bool
	// objects are a prefix's files.
	objects []Object
	err     error
}

// Download fetches every input to its path: an object becomes the file at the path, a prefix
// the directory at the path holding every object below it. Objects are written to temporary
// names next to their destination and renamed into place only once every object of an input is
// complete, so a failure leaves nothing partial at a destination path. All inputs are tried;
// the error names each object that failed.
func (s *Stager) Download(ctx context.Context, inputs []s3layout.Input) error {
	start := time.Now()
	plans := make([]*plan, len(inputs))
	var work []download
	// Prepare every input in parallel: listing a prefix is one request per 1,000 keys.
	prepared := s.forEach(ctx, len(inputs), func(ctx context.Context, i int) error {
		p, err := s.prepare(inputs[i])
		plans[i] = p
		if err == nil && p.in.Source.IsPrefix() {
			p.objects, err = s.listInput(ctx, p)
		}
		return err
	})
	for i := range plans {
		if plans[i] == nil {
			plans[i] = &plan{in: inputs[i]}
		}
		p := plans[i]
		if p.err = prepared[i]; p.err != nil {
			continue
		}
		if !p.in.Source.IsPrefix() {
			work = append(work, download{input: i, src: p.in.Source, dest: p.stage, final: p.in.Path})
			continue
		}
		for _, o := range p.objects {
			rel := filepath.FromSlash(strings.TrimPrefix(o.Key, p.in.Source.Key))
			work = append(work, download{input: i, src: s3layout.URL{Bucket: p.in.Source.Bucket, Key: o.Key},
				dest: filepath.Join(p.stage, rel), final: filepath.Join(filepath.FromSlash(p.in.Path), rel)})
		}
	}

	var total int64
	var count int
	sizes := make([]int64, len(work))
	errs := s.forEach(ctx, len(work), func(ctx context.Context, i int) error {
		n, err := s.fetch(ctx, work[i])
		sizes[i] = n
		return err
	})
	for i, err := range errs {
		total += sizes[i]
		if err == nil {
			count++
			continue
		}
		p := plans[work[i].input]
		p.err = errors.Join(p.err, err)
	}

	var failed []error
	for _, p := range plans {
		if p.err == nil {
			p.err = place(p)
		}
		if p.err != nil {
			failed = append(failed, p.err)
			if p.stage != "" {
				_ = os.RemoveAll(p.stage)
			}
		}
	}
	s.logf("stage in: %d of %s in place; %s, %s", len(inputs)-len(failed), plural.N(len(inputs), "input"), plural.N(count, "object"), rate(total, time.Since(start)))
	return joinCoded(failed)
}

// prepare checks the destination and makes the staging area of one input.
func (s *Stager) prepare(in s3layout.Input) (*plan, error) {
	p := &plan{in: in}
	dest := filepath.FromSlash(in.Path)
	fi, err := os.Stat(dest)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return p, fmt.Errorf("stage in %s: %w", in, err)
	}
	parent := filepath.Dir(dest)
	if in.Source.IsPrefix() {
		if exists && !fi.IsDir() {
			return p, exitcode.Usagef("stage in %s: %s exists and is not a directory", in, in.Path)
		}
		if exists {
			p.stage, err = os.MkdirTemp(dest, tempPrefix)
			p.into = true
		} else {
			if err = os.MkdirAll(parent, 0o755); err == nil {
				p.stage, err = os.MkdirTemp(parent, tempPrefix+filepath.Base(dest)+"-")
			}
		}
		if err != nil {
			return p, fmt.Errorf("stage in %s: making a staging directory: %w", in, err)
		}
		return p, nil
	}
	if exists && fi.IsDir() {
		return p, exitcode.Usagef("stage in %s: %s is a directory; an object becomes a file (end the key with / to download a prefix)", in, in.Path)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return p, fmt.Errorf("stage in %s: %w", in, err)
	}
	f, err := os.CreateTemp(parent, tempPrefix+filepath.Base(dest)+"-")
	if err != nil {
		return p, fmt.Errorf("stage in %s: %w", in, err)
	}
	p.stage = f.Name()
	return p, f.Close()
}

// listInput lists a prefix input's objects and checks that each maps to a path inside the
// destination directory.
func (s *Stager) listInput(ctx context.Context, p *plan) ([]Object, error) {
	src := p.in.Source
	objs, err := List(ctx, s.Client, src.Bucket, src.Key)
	if err != nil {
		return nil, Describe(err, "stage in: listing", src.String())
	}
	if len(objs) == 0 {
		return nil, exitcode.WithCode(exitcode.NotFound, fmt.Errorf("stage in %s: no objects under %s", p.in, src))
	}
	var files []Object
	for _, o := range objs {
		rel := strings.TrimPrefix(o.Key, src.Key)
		if rel == "" || strings.HasSuffix(rel, "/") {
			// A "directory marker" (an empty object whose key ends in /): make the directory.
			if err := os.MkdirAll(filepath.Join(p.stage, filepath.FromSlash(rel)), 0o755); err != nil {
				return nil, fmt.Errorf("stage in %s: %w", p.in, err)
			}
			if rel != "" && !localPath(strings.TrimSuffix(rel, "/")) {
				return nil, exitcode.Usagef("stage in %s: refusing key %q: it would land outside %s", p.in, o.Key, p.in.Path)
			}
			continue
		}
		if !localPath(rel) {
			return nil, exitcode.Usagef("stage in %s: refusing key %q: it would land outside %s", p.in, o.Key, p.in.Path)
		}
		files = append(files, o)
	}
	return files, nil
}

// localPath accepts a relative slash path that stays inside its directory: no "..", ".", or
// empty segments, not absolute.
func localPath(rel string) bool {
	if rel == "" || strings.HasPrefix(rel, "/") || strings.ContainsAny(rel, "\x00\\") {
		return false
	}
	for _, seg := range strings.Split(rel, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return filepath.IsLocal(filepath.FromSlash(rel))
}

// fetch downloads one object to d.dest (created or truncated), retrying transient failures,
// and returns its size.
func (s *Stager) fetch(ctx context.Context, d download) (int64, error) {
	if err := os.MkdirAll(filepath.Dir(d.dest), 0o755); err != nil {
		return 0, err
	}
	var n int64
	start := time.Now()
	err := s.retry(ctx, d.src.String(), func(ctx context.Context) error {
		var err error
		n, err = s.fetchOnce(ctx, d)
		return err
	})
	if err != nil {
		return n, Describe(err, "stage in: downloading", d.src.String())
	}
	s.logf("%s -> %s (%s)", d.src, d.final, rate(n, time.Since(start)))
	return n, nil
}

func (s *Stager) fetchOnce(ctx context.Context, d download) (int64, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(s.idleTimeout(), func() { cancel(errIdle) })
	defer timer.Stop()

	obj, err := s.Client.GetObject(ctx, d.src.Bucket, d.src.Key, minio.GetObjectOptions{})
	if err != nil {
		return 0, idleCause(ctx, err)
	}
	defer obj.Close()
	info, err := obj.Stat()
	if err != nil {
		return 0, idleCause(ctx, err)
	}
	f, err := os.OpenFile(d.dest, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, &idleReader{r: obj, timer: timer, d: s.idleTimeout()})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, idleCause(ctx, err)
	}
	if n != info.Size {
		return n, fmt.Errorf("got %d of %d bytes: %w", n, info.Size, io.ErrUnexpectedEOF)
	}
	return n, nil
}

// idleCause replaces the cancellation the idle timer caused with errIdle, so it is retried.
func idleCause(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), errIdle) {
		return fmt.Errorf("%w (%v)", errIdle, err)
	}
	return err
}

// place moves a complete staging area to its destination.
func place(p *plan) error {
	dest := filepath.FromSlash(p.in.Path)
	if !p.in.Source.IsPrefix() {
		if err := os.Chmod(p.stage, 0o644); err != nil {
			return err
		}
		if err := os.Rename(p.stage, dest); err != nil {
			return fmt.Errorf("stage in %s: %w", p.in, err)
		}
		p.stage = ""
		return nil
	}
	if err := os.Chmod(p.stage, 0o755); err != nil {
		return err
	}
	if !p.into {
		if err := os.Rename(p.stage, dest); err != nil {
			return fmt.Errorf("stage in %s: %w", p.in, err)
		}
		p.stage = ""
		return nil
	}
	if err := merge(p.stage, dest); err != nil {
		return fmt.Errorf("stage in %s: %w", p.in, err)
	}
	return os.RemoveAll(p.stage)
}

// merge moves every entry of dir src into dir dst: a file replaces a file, a directory is
// merged into a directory. Each move is one rename on one file system.
func merge(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		fi, err := os.Lstat(to)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			err = os.Rename(from, to)
		case err != nil:
		case e.IsDir() && fi.IsDir():
			err = merge(from, to)
		case e.IsDir() != fi.IsDir():
			err = fmt.Errorf("%s exists and is %s", to, map[bool]string{true: "a directory", false: "not a directory"}[fi.IsDir()])
		default:
			err = os.Rename(from, to)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// joinCoded joins errs and keeps an exit code: the first error's when it has one.
func joinCoded(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return exitcode.WithCode(exitcode.Of(errs[0]), errors.Join(errs...))
}
