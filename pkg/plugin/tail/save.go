package tail

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// SaveFiles is the Out of `logs --save DIR`: it takes the lines Logs, Follow and WriteArchived
// write with PrefixRank and keeps each rank's in a file of its own, without the prefix, so that
// DIR/rank-<N>.log holds what `logs --rank N --no-prefix` prints (a retried rank's attempts
// one after the other, oldest first). The rank is read back from the prefix this package
// wrote; the line after it is the log's own text, whatever it holds.
//
// Written once (not following), the files are made under temporary names and renamed by Close
// when everything was read: a failed read leaves no half-written file, and a file of an earlier
// save is replaced whole or not at all. Following, they are written in place as lines come,
// and what was followed stays when the job ends or the user stops.
type SaveFiles struct {
	dir     string
	attempt int
	inPlace bool
	created bool

	mu    sync.Mutex
	files map[int]*os.File
	lines int
	err   error
}

// SaveFileName is the file rank's lines go to: rank-<N>.log, or rank-<N>.attempt-<A>.log when
// only attempt A (> 0) of each rank is read.
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
	s := &SaveFiles{dir: dir, attempt: attempt, inPlace: inPlace, created: errors.Is(statErr, fs.ErrNotExist), files: map[int]*os.File{}}
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

// Write takes whole lines, each with its "[rank N] " prefix.
func (s *SaveFiles) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	for rest := p; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i+1], rest[i+1:]
		} else {
			rest = nil
		}
		rank, text, ok := cutRankPrefix(line)
		if !ok {
			s.err = fmt.Errorf("--save: internal error: a line without its rank: %q", line)
			return 0, s.err
		}
		f, err := s.file(rank)
		if err == nil {
			_, err = f.Write(text)
		}
		if err != nil {
			s.err = fmt.Errorf("--save: %w", err)
			return 0, s.err
		}
		s.lines++
	}
	return len(p), nil
}

// cutRankPrefix splits "[rank N] text" (prefixFor's PrefixRank) into N and text.
func cutRankPrefix(line []byte) (int, []byte, bool) {
	rest, ok := bytes.CutPrefix(line, []byte("[rank "))
	if !ok {
		return 0, nil, false
	}
	n, text, ok := bytes.Cut(rest, []byte("] "))
	if !ok {
		return 0, nil, false
	}
	rank, err := strconv.Atoi(string(n))
	if err != nil || rank < 0 {
		return 0, nil, false
	}
	return rank, text, true
}

func (s *SaveFiles) file(rank int) (*os.File, error) {
	if f := s.files[rank]; f != nil {
		return f, nil
	}
	name := s.path(rank)
	var f *os.File
	var err error
	if s.inPlace {
		f, err = os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	} else {
		f, err = os.CreateTemp(s.dir, "."+filepath.Base(name)+".tmp-*")
	}
	if err != nil {
		return nil, err
	}
	s.files[rank] = f
	return f, nil
}

// Close ends the save: after a read that failed (failed is not nil), the temporary files are
// removed (following, the files written in place are kept); otherwise they are renamed to their
// names. It returns a one-line summary for stderr.
func (s *SaveFiles) Close(failed error) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ranks := make([]int, 0, len(s.files))
	for r := range s.files {
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	var errs []error
	for _, r := range ranks {
		if err := s.files[r].Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.err != nil {
		failed = errors.Join(failed, s.err)
	}
	if !s.inPlace {
		for _, r := range ranks {
			tmp := s.files[r].Name()
			if failed == nil && len(errs) == 0 {
				if err := os.Rename(tmp, s.path(r)); err != nil {
					errs = append(errs, err)
				}
				continue
			}
			_ = os.Remove(tmp)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return "", fmt.Errorf("--save: %w", err)
	}
	if failed != nil && !s.inPlace {
		s.removeDir()
		return "", nil
	}
	return fmt.Sprintf("Saved %d lines of %d ranks in %s (%s).", s.lines, len(ranks), s.dir, strings.Replace(SaveFileName(0, s.attempt), "0", "<N>", 1)), nil
}

func (s *SaveFiles) path(rank int) string { return filepath.Join(s.dir, SaveFileName(rank, s.attempt)) }

// removeDir removes the directory CreateSaveFiles made, when nothing is in it.
func (s *SaveFiles) removeDir() {
	if s.created {
		_ = os.Remove(s.dir)
	}
}
