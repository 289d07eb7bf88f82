package checkpoint

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// Defaults of an Uploader.
const (
	// DefaultScanInterval is how often the directory is scanned when no notification comes
	// (where inotify is missing or out of instances, the only way changes are seen).
	DefaultScanInterval = 10 * time.Second
	// DefaultSettle is how long a file must stay unchanged to count as complete when no
	// close-after-write event says so.
	DefaultSettle = 5 * time.Second
	// DefaultKeep is --checkpoint-keep's default.
	DefaultKeep = s3layout.DefaultCheckpointKeep
)

// Uploader keeps a rank's complete checkpoint files in S3 while the command runs. One file is
// uploaded at a time, streamed from disk (memory bounded by the client's part buffer, not the
// file), from its own goroutine: the command never waits for it. Only files this rank wrote
// are sent: one the restore placed and the command left as it was is another rank's, or
// already in S3. A failed upload is said once in the log and tried again on the next round;
// Flush makes the last round, whose failure is the caller's to report.
type Uploader struct {
	Target
	// Keep is how many complete checkpoints stay in S3 (DefaultKeep when 0).
	Keep         int
	ScanInterval time.Duration
	Settle       time.Duration
	// NoInotify scans only (tests; where inotify is missing it is the fallback anyway).
	NoInotify bool
	Log       io.Writer
	// Own is the rank's manifest as the restore found it: the files already in S3.
	Own s3layout.Manifest
	// Placed are the files the restore wrote (Restored.Placed): never uploaded unless changed.
	Placed map[string]s3layout.ManifestFile
	// Protect is the unit the attempt resumed from: retention keeps it while the attempt runs.
	Protect string

	mu sync.Mutex
	// uploaded is what S3 holds, by path below Dir.
	uploaded map[string]s3layout.ManifestFile
	// seen is each file's state at the last scan, and since when it has been so.
	seen map[string]seenFile
	// closed are files a close-after-write event named: complete if unchanged since.
	closed map[string]bool
	// failing are files whose failed upload has been said in the log.
	failing map[string]bool
	// cut are files left out for being cut short, in the state the log said it of.
	cut map[string]seenFile
	// sealed are the units this rank saw marked outside their files (s3layout.Manifest.Sealed).
	sealed map[string]bool
	// renamed are directories moved into place (a close-after-write event for a directory).
	renamed map[string]bool
	// sent counts the files and bytes this attempt uploaded.
	sentFiles int
	sentBytes int64
	// noUnitSaid: the note that no file is a checkpoint was written.
	noUnitSaid bool
	dirty      bool
}

type seenFile struct {
	size  int64
	mtime time.Time
	since time.Time
}

func (u *Uploader) init() {
	if u.uploaded != nil {
		return
	}
	u.uploaded = map[string]s3layout.ManifestFile{}
	for _, f := range u.Own.Files {
		u.uploaded[f.Path] = f
	}
	u.seen = map[string]seenFile{}
	u.closed = map[string]bool{}
	u.failing = map[string]bool{}
	u.cut = map[string]seenFile{}
	u.sealed = map[string]bool{}
	for _, p := range u.Own.Sealed {
		u.sealed[p] = true
	}
	u.renamed = map[string]bool{}
}

func (u *Uploader) keep() int {
	if u.Keep > 0 {
		return u.Keep
	}
	return DefaultKeep
}

func (u *Uploader) scanInterval() time.Duration {
	if u.ScanInterval > 0 {
		return u.ScanInterval
	}
	return DefaultScanInterval
}

func (u *Uploader) settle() time.Duration {
	if u.Settle > 0 {
		return u.Settle
	}
	return DefaultSettle
}

func (u *Uploader) logf(format string, a ...any) {
	if u.Log != nil {
		fmt.Fprintf(u.Log, "kubectl-tao: checkpoints: "+format+"\n", a...)
	}
}

// Run uploads complete files until ctx ends: on each close-after-write notification (inotify,
// where available) and every ScanInterval. It returns when ctx is done; then call Flush.
func (u *Uploader) Run(ctx context.Context) {
	u.mu.Lock()
	u.init()
	u.mu.Unlock()
	wake := make(chan string, 64)
	if !u.NoInotify {
		stop, err := watch(u.Dir, wake)
		if err != nil {
			u.logf("no inotify (%v): scanning %s every %s", err, u.Dir, u.scanInterval())
		} else {
			defer stop()
		}
	}
	tick := time.NewTicker(u.scanInterval())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case rel := <-wake:
			u.notified(rel)
			// Take every notification already queued before the round.
			for more := true; more; {
				select {
				case rel := <-wake:
					u.notified(rel)
				default:
					more = false
				}
			}
		case <-tick.C:
		}
		_ = u.round(ctx, false)
	}
}

// notified records a notification: a file closed after writing, or a directory (its path ends
// in "/") moved into place.
func (u *Uploader) notified(rel string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if d, ok := strings.CutSuffix(rel, "/"); ok {
		u.renamed[d] = true
		return
	}
	u.closed[rel] = true
}

// Flush is the last round, once the command has ended (every file is closed): it uploads every
// file not in S3 as it is now, applies retention and writes the manifest. The unit the attempt
// resumed from is no longer read by anyone then: retention treats it as any other.
func (u *Uploader) Flush(ctx context.Context) error {
	u.mu.Lock()
	if u.Protect != "" {
		u.init()
		u.Protect = ""
		// The unit kept for the command alone goes now, if retention would have dropped it.
		if _, drop, _, err := u.retention(); err == nil && len(drop) > 0 {
			u.dirty = true
		}
	}
	u.mu.Unlock()
	return u.round(ctx, true)
}

// round scans Dir, uploads the complete files that changed, applies retention and rewrites
// the manifest when anything changed. final takes every file as complete and returns the
// first error.
func (u *Uploader) round(ctx context.Context, final bool) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.init()
	now := time.Now()
	var firstErr error
	fail := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	present := map[string]bool{}
	err := filepath.WalkDir(u.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == u.Dir && os.IsNotExist(err) {
				return filepath.SkipDir
			}
			return nil // a file removed during the walk
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(u.Dir, p)
		if err != nil {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if s3.IsPart(filepath.Base(rel)) {
			return nil // a restore's part
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		present[rel] = true
		size, mtime := info.Size(), info.ModTime().UTC()
		if f, ok := u.uploaded[rel]; ok && f.Size == size && f.Written.Equal(mtime) {
			delete(u.closed, rel)
			return nil // in S3 as it is
		}
		if f, ok := u.Placed[rel]; ok && f.Size == size && f.Written.Equal(mtime) {
			delete(u.closed, rel)
			return nil // restored, and not this rank's to keep
		}
		prev, ok := u.seen[rel]
		if !ok || prev.size != size || !prev.mtime.Equal(mtime) {
			prev = seenFile{size: size, mtime: mtime, since: now}
			u.seen[rel] = prev
		}
		complete := final || u.closed[rel] || now.Sub(prev.since) >= u.settle()
		if !complete {
			return nil
		}
		if err := u.put(ctx, rel, p, size, mtime); err != nil {
			fail(err)
			// A round cut off by its context (the last upload takes over, or its deadline
			// passed and the error is the caller's) says nothing of the file.
			if ctx.Err() == nil && !u.failing[rel] {
				u.failing[rel] = true
				u.logf("uploading %s failed, trying again later: %v", rel, err)
			}
			return nil
		}
		delete(u.closed, rel)
		if u.failing[rel] {
			delete(u.failing, rel)
			u.logf("uploaded %s after all", rel)
		}
		return nil
	})
	if err != nil {
		fail(err)
	}
	for rel := range u.seen {
		if !present[rel] {
			delete(u.seen, rel)
		}
	}
	u.sealDirectories(now, present)
	u.noteNoUnit()
	if !u.dirty {
		return firstErr
	}
	if err := u.retainAndWrite(ctx); err != nil {
		fail(err)
		if ctx.Err() == nil {
			u.logf("%v", err)
		}
	}
	return firstErr
}

// put uploads one file as it is now. A file that changed while it was read is not complete:
// it is left for a later round; so is one whose content shows it cut short (cutShort), even in
// the last round: its writer died while saving, and the previous checkpoint is the one to keep.
func (u *Uploader) put(ctx context.Context, rel, p string, size int64, mtime time.Time) error {
	f, err := s3layout.NewManifestFile(u.ResultsPrefix, u.Rank, rel, size, mtime)
	if err != nil {
		return err
	}
	file, err := os.Open(p)
	if err != nil {
		return err
	}
	defer func() { _ = file.Close() }()
	if why := cutShort(file, rel, size); why != "" {
		if c, ok := u.cut[rel]; !ok || c.size != size || !c.mtime.Equal(mtime) {
			u.cut[rel] = seenFile{size: size, mtime: mtime}
			u.logf("left out %s: %s; it is not a complete checkpoint", rel, why)
		}
		return nil
	}
	delete(u.cut, rel)
	if _, err := u.Client.PutObject(ctx, u.Bucket, f.Key, io.NewSectionReader(file, 0, size), size,
		minio.PutObjectOptions{ContentType: "application/octet-stream"}); err != nil {
		return s3.Describe(err, "uploading "+p+" to", u.url(f.Key))
	}
	if info, err := file.Stat(); err != nil || info.Size() != size || !info.ModTime().UTC().Equal(mtime) {
		return nil // changed under the upload: the next round takes it again
	}
	u.uploaded[rel] = f
	u.sentFiles++
	u.sentBytes += size
	u.dirty = true
	if s3layout.IsMarker(rel) {
		buf := make([]byte, s3layout.MaxMarkerSize)
		n, _ := file.ReadAt(buf, 0)
		if unit, ok := s3layout.MarkerOf(rel, buf[:n]); ok && !u.sealed[unit] {
			u.sealed[unit] = true
		}
	}
	return nil
}

// sealDirectories seals the units of a user's directory pattern that are complete on disk: every
// file of the directory kept, and the directory moved into place or unchanged for Settle.
func (u *Uploader) sealDirectories(now time.Time, present map[string]bool) {
	// Each file's Written is when it last changed on disk (zero: not since the attempt began),
	// so that a unit's Written is when the directory last changed.
	var onDisk []s3layout.ManifestFile
	for rel := range present {
		if s, ok := u.seen[rel]; ok {
			onDisk = append(onDisk, s3layout.ManifestFile{Path: rel, Size: s.size, Written: s.since})
		} else if f, ok := u.uploaded[rel]; ok {
			onDisk = append(onDisk, s3layout.ManifestFile{Path: rel, Size: f.Size, Written: time.Time{}})
		}
	}
	for _, unit := range s3layout.RankUnits(onDisk, nil, u.patterns()) {
		if unit.Layout != s3layout.LayoutDirectory || u.sealed[unit.Path] {
			continue
		}
		settled := u.renamed[unit.Path] || now.Sub(unit.Written) >= u.settle()
		for _, f := range unit.Files {
			s, changed := u.seen[f.Path]
			if _, kept := u.uploaded[f.Path]; !kept || changed && !u.isUploaded(f.Path, s) {
				settled = false // a file of it is not in S3 as it is on disk
			}
		}
		if settled {
			u.sealed[unit.Path] = true
			u.dirty = true
		}
	}
}

// isUploaded: the file is in S3 as it was last seen.
func (u *Uploader) isUploaded(rel string, s seenFile) bool {
	f, ok := u.uploaded[rel]
	return ok && f.Size == s.size && f.Written.Equal(s.mtime)
}

// noteNoUnit says once, after the first Keep files kept, that none of them is a checkpoint by
// the patterns: a resume would find nothing, and the user should hear it while the job runs.
func (u *Uploader) noteNoUnit() {
	if u.noUnitSaid || len(u.uploaded) < u.keep() {
		return
	}
	files := make([]s3layout.ManifestFile, 0, len(u.uploaded))
	for _, f := range u.uploaded {
		files = append(files, f)
	}
	if len(s3layout.RankUnits(files, nil, u.patterns())) > 0 {
		u.noUnitSaid = true
		return
	}
	u.noUnitSaid = true
	names := make([]string, 0, len(files))
	for _, f := range files {
		names = append(names, f.Path)
	}
	slices.Sort(names)
	if len(names) > 8 {
		names = append(names[:8], "...")
	}
	u.logf("none of the %d files kept under %s is a checkpoint by --checkpoint-pattern %s (%s): a new attempt would start from the beginning",
		len(files), u.Dir, strings.Join(u.patterns(), " "), strings.Join(names, ", "))
}

// Sent is what this attempt uploaded: files and bytes.
func (u *Uploader) Sent() (files int, bytes int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.sentFiles, u.sentBytes
}

// retention splits what S3 holds of this rank by s3layout.Retain.
func (u *Uploader) retention() (kept, drop []s3layout.ManifestFile, sealed []string, err error) {
	files := make([]s3layout.ManifestFile, 0, len(u.uploaded))
	for _, f := range u.uploaded {
		files = append(files, f)
	}
	all := make([]string, 0, len(u.sealed))
	for p := range u.sealed {
		all = append(all, p)
	}
	return s3layout.Retain(files, all, u.patterns(), u.keep(), u.Protect)
}

// retainAndWrite drops the checkpoints beyond Keep from the manifest, writes it, then deletes
// their objects: the manifest never names an object that is gone.
func (u *Uploader) retainAndWrite(ctx context.Context) error {
	kept, drop, keptSealed, err := u.retention()
	if err != nil {
		return err
	}
	data, err := s3layout.EncodeManifest(s3layout.Manifest{Rank: u.Rank, Files: kept, Sealed: keptSealed})
	if err != nil {
		return err
	}
	key := s3layout.CheckpointManifestKey(u.ResultsPrefix, u.Rank)
	if _, err := u.Client.PutObject(ctx, u.Bucket, key, strings.NewReader(string(data)), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/json"}); err != nil {
		return s3.Describe(err, "writing the checkpoint manifest", u.url(key))
	}
	u.dirty = false
	u.sealed = map[string]bool{}
	for _, p := range keptSealed {
		u.sealed[p] = true
	}
	for _, f := range drop {
		delete(u.uploaded, f.Path)
		if err := u.Client.RemoveObject(ctx, u.Bucket, f.Key, minio.RemoveObjectOptions{}); err != nil {
			u.logf("removing the old checkpoint file %s: %v", u.url(f.Key), err)
		}
	}
	return nil
}
