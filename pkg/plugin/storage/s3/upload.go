package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

// upload is one local file to put at one key.
type upload struct {
	output int
	path   string
	key    string
}

// Run names the run whose results prefix outputs go to.
type Run struct {
	Bucket string
	JobID  string
	JobUID string
}

// Upload puts every output below the run's results prefix: a file output at
// s3layout.OutputKey, a directory output's files below that key with their relative paths.
// A missing output is reported and makes the result an error, but every other output is still
// uploaded. Symbolic links to files are uploaded as the file they point to; links to
// directories, and sockets, devices and pipes, are skipped with a note.
func (s *Stager) Upload(ctx context.Context, run Run, outputs []string) error {
	start := time.Now()
	var work []upload
	errs := make([]error, len(outputs))
	for i, out := range outputs {
		files, err := s.planOutput(run, out)
		if err != nil {
			errs[i] = err
			continue
		}
		for _, f := range files {
			f.output = i
			work = append(work, f)
		}
	}
	sizes := make([]int64, len(work))
	results := s.forEach(ctx, len(work), func(ctx context.Context, i int) error {
		n, err := s.put(ctx, run.Bucket, work[i])
		sizes[i] = n
		return err
	})
	var total int64
	count := 0
	for i, err := range results {
		if err != nil {
			errs[work[i].output] = errors.Join(errs[work[i].output], err)
			continue
		}
		count++
		total += sizes[i]
	}
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	prefix, _ := s3layout.ResultsPrefix(run.JobID, run.JobUID)
	s.logf("stage out: %d of %s uploaded to s3://%s/%s; %s, %s",
		len(outputs)-len(failed), plural.N(len(outputs), "output"), run.Bucket, prefix, plural.N(count, "file"), rate(total, time.Since(start)))
	return joinCoded(failed)
}

// planOutput lists the files of one output and their keys.
func (s *Stager) planOutput(run Run, out string) ([]upload, error) {
	base, err := s3layout.OutputKey(run.JobID, run.JobUID, out)
	if err != nil {
		return nil, exitcode.WithCode(exitcode.Usage, fmt.Errorf("output %s: %w", out, err))
	}
	fi, err := os.Stat(filepath.FromSlash(out))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, exitcode.WithCode(exitcode.NotFound, fmt.Errorf("output %s does not exist: nothing uploaded for it", out))
	}
	if err != nil {
		return nil, fmt.Errorf("output %s: %w", out, err)
	}
	if fi.Mode().IsRegular() {
		return []upload{{path: out, key: base}}, nil
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("output %s is neither a file nor a directory (%s)", out, fi.Mode().Type())
	}
	root := filepath.FromSlash(out)
	var files []upload
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			fi, err := os.Stat(p)
			if err != nil || !fi.Mode().IsRegular() {
				s.logf("stage out: skipping %s: a symbolic link to a directory or to nothing", p)
				return nil
			}
		} else if !d.Type().IsRegular() {
			s.logf("stage out: skipping %s: not a regular file (%s)", p, d.Type())
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		files = append(files, upload{path: p, key: base + "/" + filepath.ToSlash(rel)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("output %s: %w", out, err)
	}
	return files, nil
}

// put uploads one file. minio-go retries each request on 5xx and transport errors (the file is
// seekable); a whole-file retry covers what outlasts those.
func (s *Stager) put(ctx context.Context, bucket string, u upload) (int64, error) {
	dest := "s3://" + bucket + "/" + u.key
	start := time.Now()
	var n int64
	err := s.retry(ctx, dest, func(ctx context.Context) error {
		info, err := s.Client.FPutObject(ctx, bucket, u.key, u.path, minio.PutObjectOptions{ContentType: "application/octet-stream"})
		n = info.Size
		return err
	})
	if err != nil {
		return 0, Describe(err, "stage out: uploading "+u.path+" to", dest)
	}
	s.logf("%s -> %s (%s)", u.path, dest, rate(n, time.Since(start)))
	return n, nil
}

// PutSnapshot uploads the first size bytes of r to s3://bucket/key, replacing the object there:
// the log archive, a file that keeps growing while its first bytes never change. The section is
// seekable, so minio-go retries the request on 5xx and transport errors.
func PutSnapshot(ctx context.Context, client *minio.Client, bucket, key string, r io.ReaderAt, size int64) error {
	_, err := client.PutObject(ctx, bucket, key, io.NewSectionReader(r, 0, size), size,
		minio.PutObjectOptions{ContentType: "text/plain; charset=utf-8"})
	return Describe(err, "uploading", "s3://"+bucket+"/"+key)
}
