package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/test/bench/benchutil"
)

// checkpointBench measures --checkpoint-dir's two transfers as the wrapper makes them in a pod,
// through the real binary's `stage run` (whose uploads run on one core at niceness 10 once the
// command has started): the last upload of a checkpoint unit after the command ends, and its
// restore into an empty directory at the start of the next attempt; against `rclone copy` of
// the same directory up and down. The unit is one directory of files incompressible files, mib
// MiB in all, as a sharded or HF-shaped save writes it.
func checkpointBench(ctx context.Context, c *minio.Client, env []string, tao, rclone, tmp string, runs, mib, files int) error {
	if files < 1 || mib < 1 {
		return fmt.Errorf("a checkpoint unit of %d files, %d MiB: want at least one of each", files, mib)
	}
	src := filepath.Join(tmp, "ckpt-src")
	size := int64(mib) << 20
	names := make([]string, files)
	sizes := make([]int64, files)
	for i := range files {
		names[i] = fmt.Sprintf("%s/shard-%02d-of-%02d.pt", unitDir, i+1, files)
		if i == files-1 {
			// Written last, the file that marks an HF unit complete: without it none is restored.
			names[i] = unitDir + "/" + s3layout.HFTrainerState
		}
		// Equal shares, the last taking the remainder, so that they add up to size.
		sizes[i] = size / int64(files)
		if i == files-1 {
			sizes[i] = size - sizes[i]*int64(files-1)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, names[i])), 0o755); err != nil {
			return err
		}
		if err := writeRandom(filepath.Join(src, names[i]), sizes[i], uint64(i)); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "s3bench: wrote a checkpoint unit of %d files, %d MiB\n", files, mib)
	// checkKeys checks that every file of the unit is in S3 whole, at the key it maps to;
	// checkUnit that every file is below dir, whole.
	checkKeys := func(prefix func(name string) (string, error)) error {
		for i, name := range names {
			key, err := prefix(name)
			if err != nil {
				return err
			}
			if err := checkSize(ctx, c, key, sizes[i]); err != nil {
				return err
			}
		}
		return nil
	}
	checkUnit := func(dir string) error {
		for i, name := range names {
			if err := checkFile(filepath.Join(dir, filepath.FromSlash(name)), sizes[i]); err != nil {
				return err
			}
		}
		return nil
	}
	stage := func(dir, uid, pod string) []string {
		return append(env[:len(env):len(env)], s3layout.EnvJobID+"=ck", s3layout.EnvJobUID+"="+uid, s3layout.EnvPodName+"="+pod,
			s3layout.EnvStageCheckpointDir+"="+dir, s3layout.EnvStageGracePeriod+"=3600")
	}
	var up, down, rcUp, rcDown []benchutil.Sample
	for i := range runs {
		uid := fmt.Sprintf("uid-%d", i)
		// The first attempt: nothing to restore, the command ends at once, the file is uploaded.
		s, err := benchutil.Measure(stage(src, uid, "ck-0-aaaaa"), tao, "stage", "run", "--no-log-archive", "--", "true")
		if err != nil {
			return err
		}
		err = checkKeys(func(name string) (string, error) { return s3layout.CheckpointFileKey("results/ck/"+uid+"/", 0, name) })
		if err != nil {
			return err
		}
		up = append(up, s)
		// The next attempt: an empty directory, the checkpoint restored before the command.
		dst := filepath.Join(tmp, fmt.Sprintf("ckpt-restore-%d", i))
		s, err = benchutil.Measure(stage(dst, uid, "ck-0-bbbbb"), tao, "stage", "run", "--no-log-archive", "--", "true")
		if err == nil {
			err = checkUnit(dst)
		}
		if err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		down = append(down, s)
		if err := os.RemoveAll(dst); err != nil {
			return err
		}
		if rclone == "" {
			continue
		}
		remote := fmt.Sprintf("bench:%s/rclone-ckpt/%d/", bucket, i)
		s, err = benchutil.Measure(env, rclone, "copy", src, remote)
		if err == nil {
			err = checkKeys(func(name string) (string, error) { return fmt.Sprintf("rclone-ckpt/%d/%s", i, name), nil })
		}
		if err != nil {
			return fmt.Errorf("rclone copy up: %w", err)
		}
		rcUp = append(rcUp, s)
		s, err = benchutil.Measure(env, rclone, "copy", remote, dst)
		if err == nil {
			err = checkUnit(dst)
		}
		if err != nil {
			return fmt.Errorf("rclone copy down: %w", err)
		}
		rcDown = append(rcDown, s)
		if err := os.RemoveAll(dst); err != nil {
			return err
		}
	}
	gib := float64(size) / (1 << 30)
	fmt.Printf("\n--checkpoint-dir: one checkpoint unit (%s/, %d files) of %d MiB, uploaded and restored (%d runs each)\n", unitDir, files, mib, runs)
	benchutil.Header()
	row := func(name string, s benchutil.Summary) {
		benchutil.Row(name, s)
		fmt.Printf("  %-62s %9s CPU-seconds per GiB: %.2f\n", "", "", s.CPU.Seconds()/gib)
	}
	row("kubectl-tao stage run (last upload of the unit)", benchutil.Median(up))
	if rclone != "" {
		row("rclone copy DIR REMOTE:BUCKET/PREFIX", benchutil.Median(rcUp))
		ratio("ratio kubectl-tao / rclone (upload)", benchutil.Median(up), benchutil.Median(rcUp))
	}
	row("kubectl-tao stage run (restore into an empty directory)", benchutil.Median(down))
	if rclone != "" {
		row("rclone copy REMOTE:BUCKET/PREFIX DIR", benchutil.Median(rcDown))
		ratio("ratio kubectl-tao / rclone (restore)", benchutil.Median(down), benchutil.Median(rcDown))
	}
	return nil
}

// unitDir is the checkpoint unit's directory below the checkpoint dir, named as HF's Trainer
// names its saves.
const unitDir = "checkpoint-100"

// writeRandom writes size pseudo-random bytes (seeded by seed), as incompressible as weights.
func writeRandom(path string, size int64, seed uint64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(3, 4+seed))
	buf := make([]byte, 1<<20)
	for written := int64(0); written < size; written += int64(len(buf)) {
		for i := 0; i < len(buf); i += 8 {
			v := rng.Uint64()
			for j := range 8 {
				buf[i+j] = byte(v >> (8 * j))
			}
		}
		n := min(int64(len(buf)), size-written)
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return err
		}
	}
	// An old modification time: the uploader takes it as complete at once, as a checkpoint
	// the command closed long before it ended.
	old := time.Now().Add(-time.Hour)
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chtimes(path, old, old)
}

func checkSize(ctx context.Context, c *minio.Client, key string, size int64) error {
	info, err := c.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return fmt.Errorf("s3://%s/%s: %w", bucket, key, err)
	}
	if info.Size != size {
		return fmt.Errorf("s3://%s/%s: %d bytes, want %d", bucket, key, info.Size, size)
	}
	return nil
}

func checkFile(path string, size int64) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if info.Size() != size {
		return fmt.Errorf("%s: %d bytes, want %d", path, info.Size(), size)
	}
	return nil
}
