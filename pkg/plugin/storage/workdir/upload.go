package workdir

import (
	"context"
	"fmt"

	"github.com/minio/minio-go/v7"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// Upload puts a run's archive at s3layout.WorkdirKey in bucket. remove deletes it again, for a
// submit that fails after the upload: nothing of a failed submit stays behind. progress, when
// not nil, is called with the bytes sent so far.
func Upload(ctx context.Context, client *minio.Client, bucket, job, uid string, archive *Archive, progress func(done int64)) (remove func(context.Context) error, err error) {
	key, err := s3layout.WorkdirKey(job, uid)
	if err != nil {
		return nil, err
	}
	what := "s3://" + bucket + "/" + key
	opts := minio.PutObjectOptions{ContentType: "application/zstd"}
	if progress != nil {
		opts.Progress = &progressReader{report: progress}
	}
	_, err = client.PutObject(ctx, bucket, key, archive.Reader(), archive.Size(), opts)
	if err != nil {
		return nil, fmt.Errorf("uploading the --workdir archive: %w", s3.Describe(err, "upload", what))
	}
	return func(ctx context.Context) error {
		if err := client.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{}); err != nil {
			return s3.Describe(err, "delete", what)
		}
		return nil
	}, nil
}

// progressReader is minio's progress hook: it is "read" every chunk that was sent.
type progressReader struct {
	done   int64
	report func(int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	p.done += int64(len(b))
	p.report(p.done)
	return len(b), nil
}
