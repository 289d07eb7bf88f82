package checkpoint

import (
	"context"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// fetchPlan downloads a restore plan into t.Dir through the S3 engine (in parallel, each file
// retried, bounded by the idle timeout, checked for its size and ETag and renamed into place),
// each file with its modification time set to its write time in the manifest, and returns the
// files and bytes now in place: a file already there whole (the same size and write time) is
// kept, not fetched again. Every file is tried; the error names each object that failed.
func fetchPlan(ctx context.Context, t Target, plan []s3layout.RestoreFile) (files int, bytes int64, err error) {
	want := make([]s3.File, len(plan))
	for i, f := range plan {
		want[i] = s3.File{Key: f.Key, Path: f.Path, Size: f.Size, ModTime: f.Written}
	}
	res, err := (&s3.Stager{Client: t.Client}).DownloadFiles(ctx, s3.Files{
		Bucket: t.Bucket, Dir: t.Dir, Files: want, Op: "checkpoint restore: downloading",
	})
	if err != nil {
		return 0, 0, err
	}
	for _, f := range plan {
		bytes += f.Size
	}
	return res.Downloaded + res.Skipped, bytes, nil
}
