package tail

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

// SaveFiles is the Split of `logs --save DIR`: it keeps each attempt's lines, which the engine
// writes without prefix, in a file of its own. A rank that had one attempt has one file,
// DIR/rank-<N>.log, holding what `logs --rank N --no-prefix` prints. A rank that had several (a
// Job submitted with --retries reruns a failed rank in a new pod) has one file per attempt,
// DIR/rank-<N>.attempt-<A>.log, A numbered from 1, oldest first, as `logs --attempt A` numbers
// them, and no rank-<N>.log; read one after the other they are what `logs --rank N
// --no-prefix` prints. With --attempt A, only attempt A of each rank is read and every file is
// rank-<N>.attempt-<A>.log. Which attempt a line belongs to is the engine's to say (the target
// of the writer For returns: the pod, or the archived object, it was read from).
//
// Written once (not following), the files are made under temporary names and renamed by Close
// when everything was read: a failed read leaves no half-written file, and a file of an earlier
// save is replaced whole or not at all (a rank-<N>.log an earlier save left for a rank now
// split in attempts is removed, as it would read as the whole rank's log). Following, they are
// written in place as lines come, and what was followed stays when the job ends or the user
// stops; a rank's rank-<N>.log is renamed to its attempt's name when the rank's next attempt
// starts writing.
type SaveFiles struct {
	dir     string
	attempt int
	inPlace bool
	created bool

	mu    sync.Mutex
	files map[int][]*savedFile // rank -> its attempts' files, in the order their lines came
	lines int
	err   error
}

// savedFile is the file of one attempt of a rank.
type savedFile struct {
	attempt int
	f       *os.File
	name    string // following (written in place), its name in dir now; else Close names it
}

// SaveFileName is the file a rank's lines go to: rank-<N>.log for attempt 0, the rank's only
// attempt, or rank-<N>.attempt-<A>.log for attempt A (> 0) of a rank that had several, or of
// each rank when only attempt A is read.
func SaveFileName(rank, attempt int) string {
	name := "rank-" + strconv.Itoa(rank)
	if attempt > 0 {
		name += ".attempt-" + strconv.Itoa(attempt)
	}
	return name + ".log"
}

// CheckSaveDir refuses a DIR that exists and is not a directory. It only reads the file system.
func CheckSaveDir(dir string) error {
	if dir == "" {
		return errors.New("--save needs a directory")
	}
	st, err := os.Stat(dir)
	if err == nil && !st.IsDir() {
		return fmt.Errorf("--save %s: not a directory", dir)
	}
	return nil
}

// CreateSaveFiles makes dir when it does not exist and checks that a file can be written in
// it, before anything is read: a directory that cannot be written fails at once, with nothing
// left behind (a directory it made is removed again).
func CreateSaveFiles(dir string, attempt int, inPlace bool) (*SaveFiles, error) {
	if err := CheckSaveDir(dir); err != nil {
		return nil, err
	}
	_, statErr := os.Stat(dir)
	s := &SaveFiles{dir: dir, attempt: attempt, inPlace: inPlace, created: errors.Is(statErr, fs.ErrNotExist), files: map[int][]*savedFile{}}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--save: %w", err)
	}
	probe, err := os.CreateTemp(dir, ".kubectl-tao-save-*")
	if err != nil {
		s.removeDir()
		return nil, fmt.Errorf("--save: cannot write in %s: %w", dir, err)
	}
	_ = probe.Close()
	_ = os.Remove(probe.Name())
	return s, nil
}

// For is the writer of t's lines: those of attempt t.Attempt of rank t.Rank, whole lines per
// Write, without prefix. Its file is made at its first line: an attempt that printed nothing
// has none. The writers may be used from many goroutines at once.
func (s *SaveFiles) For(t Target) io.Writer {
	return &attemptWriter{s: s, rank: t.Rank, attempt: t.Attempt}
}

type attemptWriter struct {
	s             *SaveFiles
	rank, attempt int
}

func (w *attemptWriter) Write(p []byte) (int, error) {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	f, err := s.file(w.rank, w.attempt)
	if err == nil {
		_, err = f.Write(p)
	}
	if err != nil {
		s.err = fmt.Errorf("--save: %w", err)
		return 0, s.err
	}
	s.lines += bytes.Count(p, []byte{'\n'})
	return len(p), nil
}

// file is the open file of an attempt of rank, made at its first line. Following, the file of
// a rank's first attempt is renamed to its attempt's name when a second attempt comes.
func (s *SaveFiles) file(rank, attempt int) (*os.File, error) {
	for _, sf := range s.files[rank] {
		if sf.attempt == attempt {
			return sf.f, nil
		}
	}
	sf := &savedFile{attempt: attempt}
	if s.inPlace {
		if prev := s.files[rank]; len(prev) == 1 && s.attempt == 0 {
			first := prev[0]
			name := filepath.Join(s.dir, SaveFileName(rank, first.attempt))
			if err := os.Rename(first.name, name); err != nil {
				return nil, err
			}
			first.name = name
		}
		sf.name = filepath.Join(s.dir, s.fileName(rank, attempt, len(s.files[rank])+1))
		f, err := os.OpenFile(sf.name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return nil, err
		}
		sf.f = f
	} else {
		f, err := os.CreateTemp(s.dir, ".rank-"+strconv.Itoa(rank)+".tmp-*")
		if err != nil {
			return nil, err
		}
		sf.f = f
	}
	s.files[rank] = append(s.files[rank], sf)
	return sf.f, nil
}

// fileName is the name of attempt's file of a rank that had attempts attempts.
func (s *SaveFiles) fileName(rank, attempt, attempts int) string {
	if attempts == 1 && s.attempt == 0 {
		return SaveFileName(rank, 0)
	}
	return SaveFileName(rank, attempt)
}

// Close ends the save: after a read that failed (failed is not nil), the temporary files are
// removed (following, the files written in place are kept); otherwise they are renamed to their
// names. It returns a one-line summary for stderr.
func (s *SaveFiles) Close(failed error) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ranks := slices.Sorted(maps.Keys(s.files))
	var errs []error
	for _, r := range ranks {
		for _, sf := range s.files[r] {
			if err := sf.f.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if s.err != nil {
		failed = errors.Join(failed, s.err)
	}
	// Nothing is written after the end: a late line would make a file the summary does not count.
	s.err = errors.New("--save: written after the end")
	if !s.inPlace {
		for _, r := range ranks {
			attempts := s.files[r]
			for _, sf := range attempts {
				tmp := sf.f.Name()
				if failed == nil && len(errs) == 0 {
					if err := os.Rename(tmp, filepath.Join(s.dir, s.fileName(r, sf.attempt, len(attempts)))); err != nil {
						errs = append(errs, err)
					}
					continue
				}
				_ = os.Remove(tmp)
			}
			if failed == nil && len(errs) == 0 && len(attempts) > 1 && s.attempt == 0 {
				// An earlier save's file of the rank, when it had one attempt.
				if err := os.Remove(filepath.Join(s.dir, SaveFileName(r, 0))); err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, err)
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return "", fmt.Errorf("--save: %w", err)
	}
	if failed != nil && !s.inPlace {
		s.removeDir()
		return "", nil
	}
	return fmt.Sprintf("Saved %s of %s in %s (%s).", plural.N(s.lines, "line"), plural.N(len(ranks), "rank"), s.dir, s.names(ranks)), nil
}

// names says which files the save wrote, for the summary: rank-<N>.log for the ranks that had
// one attempt, and each attempt's file of the ranks that had several (the ranks named, up to
// a few).
func (s *SaveFiles) names(ranks []int) string {
	if s.attempt > 0 {
		return strings.Replace(SaveFileName(0, s.attempt), "0", "<N>", 1)
	}
	var split []int
	for _, r := range ranks {
		if len(s.files[r]) > 1 {
			split = append(split, r)
		}
	}
	var parts []string
	if len(split) < len(ranks) || len(ranks) == 0 {
		parts = append(parts, strings.Replace(SaveFileName(0, 0), "0", "<N>", 1))
	}
	switch {
	case len(split) == 1:
		r := split[0]
		attempts := make([]int, len(s.files[r]))
		for i, sf := range s.files[r] {
			attempts[i] = sf.attempt
		}
		slices.Sort(attempts)
		files := make([]string, len(attempts))
		for i, a := range attempts {
			files[i] = SaveFileName(r, a)
		}
		parts = append(parts, fmt.Sprintf("rank %d had %d attempts: %s", r, len(files), strings.Join(files, ", ")))
	case len(split) > 1:
		const named = 5
		list := make([]string, 0, named)
		for _, r := range split[:min(len(split), named)] {
			list = append(list, strconv.Itoa(r))
		}
		more := ""
		if len(split) > named {
			more = fmt.Sprintf(" and %d more", len(split)-named)
		}
		parts = append(parts, fmt.Sprintf("ranks %s%s had several attempts: rank-<N>.attempt-<A>.log", strings.Join(list, ", "), more))
	}
	return strings.Join(parts, "; ")
}

// removeDir removes the directory CreateSaveFiles made, when nothing is in it.
func (s *SaveFiles) removeDir() {
	if s.created {
		_ = os.Remove(s.dir)
	}
}
