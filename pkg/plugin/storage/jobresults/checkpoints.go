package jobresults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// Checkpoint is one checkpoint unit a run kept (--checkpoint-dir), as results, status and
// diagnose show it: a file or a directory, with every rank's files of it.
type Checkpoint struct {
	// Path is the file or the directory below the checkpoint directory.
	Path   string          `json:"path"`
	Layout s3layout.Layout `json:"layout"`
	// Files and Size count every rank's files of it.
	Files   int       `json:"files"`
	Size    int64     `json:"size"`
	Written time.Time `json:"written"`
	// Ranks kept its files.
	Ranks []int `json:"ranks"`
	// Complete: its framework marked it complete and every rank's part is kept; only a
	// complete unit is restored or resumed from.
	Complete bool `json:"complete"`
	// Resume marks the one a new attempt resumes from: the newest complete one.
	Resume bool `json:"resume,omitempty"`
}

// checkpointOf is what a unit is shown as.
func checkpointOf(u s3layout.Unit) Checkpoint {
	return Checkpoint{Path: u.Path, Layout: u.Layout, Files: len(u.Files), Size: u.Size(), Written: u.Written, Ranks: u.Ranks, Complete: u.Complete}
}

// errNoManifest: the rank kept no checkpoint yet.
var errNoManifest = errors.New("no checkpoint manifest")

// readManifest reads one rank's manifest.
func readManifest(ctx context.Context, client *minio.Client, bucket, resultsPrefix string, rank int) (s3layout.Manifest, error) {
	key := s3layout.CheckpointManifestKey(resultsPrefix, rank)
	data, err := s3.Get(ctx, client, bucket, key)
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return s3layout.Manifest{}, errNoManifest
		}
		return s3layout.Manifest{}, s3.Describe(err, "reading", "s3://"+bucket+"/"+key)
	}
	m, err := s3layout.ParseManifest(resultsPrefix, rank, data)
	if err != nil {
		return s3layout.Manifest{}, fmt.Errorf("s3://%s/%s: %w", bucket, key, err)
	}
	return m, nil
}

// ReadManifests reads the manifest of every rank among objs (listed under the run's results
// prefix, or its checkpoints prefix), by rank, a few at a time.
func ReadManifests(ctx context.Context, client *minio.Client, bucket, resultsPrefix string, objs []s3.Object) (map[int]s3layout.Manifest, error) {
	var ranks []int
	for _, o := range objs {
		if rank, ok := s3layout.ManifestRank(resultsPrefix, o.Key); ok {
			ranks = append(ranks, rank)
		}
	}
	out := make(map[int]s3layout.Manifest, len(ranks))
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, rank := range ranks {
		g.Go(func() error {
			m, err := readManifest(gctx, client, bucket, resultsPrefix, rank)
			if errors.Is(err, errNoManifest) {
				return nil // removed since the listing
			}
			if err != nil {
				return err
			}
			mu.Lock()
			out[rank] = m
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// ListCheckpoints reads the manifest of every rank among objs (listed under the run's results
// prefix) and returns the run's checkpoint units, complete or not, newest first.
func ListCheckpoints(ctx context.Context, client *minio.Client, bucket, resultsPrefix string, objs []s3.Object, patterns []string) ([]Checkpoint, error) {
	manifests, err := ReadManifests(ctx, client, bucket, resultsPrefix, objs)
	if err != nil {
		return nil, err
	}
	var out []Checkpoint
	resumeSet := false
	for _, u := range s3layout.RunUnits(manifests, patterns) {
		c := checkpointOf(u)
		if u.Complete && !resumeSet {
			c.Resume, resumeSet = true, true
		}
		out = append(out, c)
	}
	return out, nil
}

// RunManifests lists the run's checkpoints and reads every rank's manifest (ReadManifests).
func RunManifests(ctx context.Context, client *minio.Client, bucket, resultsPrefix string) (map[int]s3layout.Manifest, error) {
	prefix := s3layout.CheckpointsPrefix(resultsPrefix)
	objs, err := s3.List(ctx, client, bucket, prefix)
	if err != nil {
		return nil, s3.Describe(err, "listing", "s3://"+bucket+"/"+prefix)
	}
	return ReadManifests(ctx, client, bucket, resultsPrefix, objs)
}

// LastCheckpoint is the unit a new attempt of the run would resume from, read from the list of
// its manifests and each manifest; false when the run kept none complete.
func LastCheckpoint(ctx context.Context, client *minio.Client, bucket, resultsPrefix string, patterns []string) (Checkpoint, bool, error) {
	manifests, err := RunManifests(ctx, client, bucket, resultsPrefix)
	if err != nil {
		return Checkpoint{}, false, err
	}
	u, ok := s3layout.ResumeUnit(s3layout.RunUnits(manifests, patterns))
	if !ok {
		return Checkpoint{}, false, nil
	}
	c := checkpointOf(u)
	c.Resume = true
	return c, true, nil
}

// lookTimeout bounds KeptCheckpoint: status and diagnose answer even when the bucket does not.
const lookTimeout = 5 * time.Second

// KeptCheckpoint is the checkpoint a new attempt of job (submitted with --checkpoint-dir) would
// resume from, read with the credentials at hand (the shell's, else the Job's Secret) in one
// request to S3. kept is false when the job keeps no checkpoints, has kept none yet, or they
// cannot be read: callers show what they can without it.
func KeptCheckpoint(ctx context.Context, client kubernetes.Interface, job *batchv1.Job, getenv func(string) string) (c Checkpoint, kept bool) {
	settings, ok, err := Checkpoints(job)
	if err != nil || !ok || settings.OnVolume {
		return Checkpoint{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, lookTimeout)
	defer cancel()
	store, err := Connect(ctx, client, Lookup{Namespace: job.Namespace, Name: job.Name, Job: job, Source: Source{Getenv: getenv}})
	if err != nil {
		return Checkpoint{}, false
	}
	prefix, err := s3layout.ResultsPrefix(job.Name, string(job.UID))
	if err != nil {
		return Checkpoint{}, false
	}
	c, ok, err = LastCheckpoint(ctx, store.Client, store.Bucket, prefix, settings.PatternsOrDefault())
	return c, ok && err == nil
}
