package s3

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/minio/minio-go/v7"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

// List returns every object whose key starts with prefix (recursively), in key order.
func List(ctx context.Context, client *minio.Client, bucket, prefix string) ([]Object, error) {
	var out []Object
	for o := range client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, o.Err
		}
		// Defensive: a server that ignored the prefix must not widen what callers delete.
		if !strings.HasPrefix(o.Key, prefix) {
			continue
		}
		out = append(out, Object{Key: o.Key, Size: o.Size, LastModified: o.LastModified.UTC(), ETag: o.ETag})
	}
	return out, nil
}

// MaxSmallObject bounds what Get reads into memory: a manifest or another control object is
// far smaller, so one this large is not what the caller expects.
const MaxSmallObject = 64 << 20

// Get reads a whole small object (a manifest, a marker) into memory, at most MaxSmallObject
// bytes.
func Get(ctx context.Context, client *minio.Client, bucket, key string) ([]byte, error) {
	return GetBounded(ctx, client, bucket, key, MaxSmallObject)
}

// GetBounded reads a whole object into memory, failing with an error naming it, before its body
// is read, when it is larger than limit bytes.
func GetBounded(ctx context.Context, client *minio.Client, bucket, key string, limit int64) ([]byte, error) {
	body, info, _, err := minio.Core{Client: client}.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer func() { _ = body.Close() }()
	tooLarge := func() error {
		return fmt.Errorf("s3://%s/%s is %s, larger than the %s read into memory at most", bucket, key, humanBytes(info.Size), humanBytes(limit))
	}
	if info.Size > limit {
		return nil, tooLarge()
	}
	var b bytes.Buffer
	b.Grow(int(max(info.Size, 0)))
	// The answer's length is the server's word: the read stops past the bound whatever it said.
	n, err := b.ReadFrom(io.LimitReader(body, limit+1))
	if err != nil {
		return nil, err
	}
	if n > limit {
		info.Size = n
		return nil, tooLarge()
	}
	return b.Bytes(), nil
}

// Open opens an object to read as a stream (a log): one GET, whose error comes back here. Its
// errors, here and while reading, are described (Describe) with op and the object's URL. The
// caller closes it.
func Open(ctx context.Context, client *minio.Client, bucket, key, op string) (io.ReadCloser, error) {
	what := "s3://" + bucket + "/" + key
	body, _, _, err := minio.Core{Client: client}.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, Describe(err, op, what)
	}
	return describedReader{body, op, what}, nil
}

// describedReader describes the errors of a stream with the object it reads.
type describedReader struct {
	io.ReadCloser
	op, what string
}

func (r describedReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = Describe(err, r.op, r.what)
	}
	return n, err
}

// Removed is what DeletePrefix removed.
type Removed struct {
	Objects int
	Bytes   int64
}

// maxReported bounds how many failed keys an error names.
const maxReported = 5

// DeletePrefix deletes every object under prefix, which must end in "/" (a directory-like
// prefix, so that results/job/uid never matches results/job/uid2), then lists it again and
// fails unless it is empty. Objects are listed and removed as a stream (1,000 keys per
// DeleteObjects request), so any number of objects takes constant memory.
func DeletePrefix(ctx context.Context, client *minio.Client, bucket, prefix string) (Removed, error) {
	var rm Removed
	what := "s3://" + bucket + "/" + prefix
	if prefix == "" || !strings.HasSuffix(prefix, "/") {
		return rm, fmt.Errorf("refusing to delete %s: a prefix must be non-empty and end in /", what)
	}
	listCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	listed := make(chan minio.ObjectInfo)
	listerDone := make(chan struct{})
	var listErr error
	var mu sync.Mutex
	sizes := map[string]int64{}
	go func() {
		defer close(listerDone)
		defer close(listed)
		for o := range client.ListObjects(listCtx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if o.Err != nil {
				listErr = o.Err
				return
			}
			if !strings.HasPrefix(o.Key, prefix) {
				continue
			}
			mu.Lock()
			sizes[o.Key] = o.Size
			mu.Unlock()
			select {
			case listed <- o:
			case <-listCtx.Done():
				return
			}
		}
	}()
	var failed []string
	var firstErr error
	for res := range client.RemoveObjectsWithResult(listCtx, bucket, listed, minio.RemoveObjectsOptions{}) {
		if res.Err != nil {
			if firstErr == nil {
				firstErr = res.Err
			}
			failed = append(failed, res.ObjectName)
			continue
		}
		rm.Objects++
		mu.Lock()
		rm.Bytes += sizes[res.ObjectName]
		mu.Unlock()
	}
	// RemoveObjectsWithResult reads the listing to its end (or until ctx is done).
	cancel()
	<-listerDone
	if listErr != nil {
		return rm, Describe(listErr, "listing", what)
	}
	if firstErr != nil {
		return rm, Describe(fmt.Errorf("%s not removed (%s): %w", plural.N(len(failed), "object"), sample(failed), firstErr), "deleting", what)
	}
	left, err := List(ctx, client, bucket, prefix)
	if err != nil {
		return rm, Describe(err, "verifying (listing)", what)
	}
	if len(left) > 0 {
		keys := make([]string, len(left))
		for i, o := range left {
			keys[i] = o.Key
		}
		return rm, fmt.Errorf("deleting %s: %s %s after the delete (%s)", what, plural.N(len(left), "object"), plural.Word(len(left), "remains", "remain"), sample(keys))
	}
	return rm, nil
}

// sample names up to maxReported keys.
func sample(keys []string) string {
	if len(keys) <= maxReported {
		return strings.Join(keys, ", ")
	}
	return strings.Join(keys[:maxReported], ", ") + fmt.Sprintf(" and %d more", len(keys)-maxReported)
}
