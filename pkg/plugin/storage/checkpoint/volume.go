package checkpoint

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// A checkpoint directory on a --volume is kept by the volume: nothing is restored or uploaded.
// The attempts are recorded on it instead of in S3, one empty file per pod under
// <dir>/.kubectl-tao/attempts/rank-<N>/, and the checkpoint to resume from is the newest
// complete one the directory holds.

// attemptsDir is where the volume records rank's attempts.
func attemptsDir(dir string, rank int) string {
	return filepath.Join(dir, s3layout.ToolDir, "attempts", "rank-"+strconv.Itoa(rank))
}

// StartOnVolume numbers this attempt of the rank from the records on the volume, records it,
// and picks the checkpoint to resume from. An error is the attempt's failure (exit 201).
func StartOnVolume(t Target, pod string, log io.Writer) (*Session, error) {
	records := attemptsDir(t.Dir, t.Rank)
	if err := os.MkdirAll(records, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoints on the volume: %w", err)
	}
	entries, err := os.ReadDir(records)
	if err != nil {
		return nil, fmt.Errorf("checkpoints on the volume: %w", err)
	}
	// The records as AttemptOf reads them from S3: keys under an empty results prefix.
	var objs []s3layout.ArchivedObject
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			continue
		}
		if key, err := s3layout.CheckpointAttemptKey("", t.Rank, e.Name()); err == nil {
			objs = append(objs, s3layout.ArchivedObject{Key: key, LastModified: info.ModTime()})
		}
	}
	attempt := s3layout.AttemptOf("", t.Rank, pod, objs)
	if _, err := s3layout.CheckpointAttemptKey("", t.Rank, pod); err == nil {
		if err := os.WriteFile(filepath.Join(records, pod), nil, 0o644); err != nil {
			return nil, fmt.Errorf("checkpoints on the volume: recording the attempt: %w", err)
		}
	}
	resume := newestOnDisk(t)
	if log != nil {
		shown := "none"
		if resume != "" {
			shown = resume
		}
		fmt.Fprintf(log, "kubectl-tao: checkpoints: on the volume at %s (nothing to restore); attempt %d; resume checkpoint: %s\n", t.Dir, attempt, shown)
	}
	s := &Session{Restored: Restored{Resume: resume}, Attempt: attempt, target: t}
	s.once.Do(func() {}) // Finish has nothing to upload
	return s, nil
}

// newestOnDisk is the newest complete unit in t.Dir (by modification time, as the manifest's
// write times order them in S3), as its framework's resume argument takes it, "" for none: a
// unit with a file whose content shows it cut short is passed over for the one before it.
func newestOnDisk(t Target) string {
	var files []s3layout.ManifestFile
	_ = filepath.WalkDir(t.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, rerr := filepath.Rel(t.Dir, p)
		if rerr != nil {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == s3layout.ToolDir {
				return filepath.SkipDir
			}
			return nil
		}
		info, ierr := d.Info()
		if ierr != nil || !d.Type().IsRegular() {
			return nil
		}
		files = append(files, s3layout.ManifestFile{Path: rel, Size: info.Size(), Written: info.ModTime().UTC()})
		return nil
	})
	// On the volume the markers are the files themselves: the unit each names now is sealed; a
	// user's directory counts once every file of it is whole.
	var sealed []string
	for _, f := range files {
		if !s3layout.IsMarker(f.Path) {
			continue
		}
		if b, err := readBounded(filepath.Join(t.Dir, filepath.FromSlash(f.Path)), s3layout.MaxMarkerSize); err == nil {
			if unit, ok := s3layout.MarkerOf(f.Path, b); ok {
				sealed = append(sealed, unit)
			}
		}
	}
	for _, u := range s3layout.RankUnits(files, sealed, t.patterns()) {
		if !u.Complete && u.Layout != s3layout.LayoutDirectory {
			continue
		}
		whole := true
		for _, f := range u.Files {
			if intactOnDisk(filepath.Join(t.Dir, filepath.FromSlash(f.Path)), f.Size) != "" {
				whole = false
			}
		}
		if whole {
			return filepath.Join(t.Dir, filepath.FromSlash(u.ResumePath()))
		}
	}
	return ""
}

// readBounded reads at most limit bytes of the file at p.
func readBounded(p string, limit int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	return io.ReadAll(io.LimitReader(f, limit))
}

// intactOnDisk is cutShort for a file on disk ("" when nothing shows it incomplete).
func intactOnDisk(p string, size int64) string {
	f, err := os.Open(p)
	if err != nil {
		return err.Error()
	}
	defer func() { _ = f.Close() }()
	return cutShort(f, filepath.Base(p), size)
}
