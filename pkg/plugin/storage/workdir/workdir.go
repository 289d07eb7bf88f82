// Package workdir packs a local directory into the reproducible archive `submit --workdir`
// ships with a job, and unpacks it again inside the pod (`kubectl-tao stage workdir`).
//
// The archive is a tar compressed with zstd: entries sorted by path, times zeroed, owners
// zeroed and unnamed, modes reduced to 0644/0755, so that the same tree always gives the same
// bytes and therefore the same SHA-256, which is what a user compares to know which code ran.
// zstd comes from github.com/klauspost/compress, already linked into the binary by the S3
// client: it packs faster and smaller than gzip at no new dependency. The stream is a sequence
// of independently compressed frames, packed on every core (frames.go).
//
// What goes in: every regular file, directory and symlink below DIR, less `.git` (always) and
// what `.gitignore` and `.taoignore` files exclude (gitignore syntax; at each level .taoignore's
// lines come after .gitignore's, so they win). A symlink whose target leaves DIR is refused:
// the pod would not have the file it points to, and following it could ship files from
// outside the directory the user named.
package workdir

import (
	"archive/tar"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	ignore "github.com/sabhiram/go-gitignore"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/plural"
)

const (
	// DefaultMaxSize bounds the uncompressed size of the files packed (--workdir-max-size).
	DefaultMaxSize = 256 << 20
	// ArchiveName is the archive's file name, in a ConfigMap key and in S3.
	ArchiveName = s3layout.WorkdirArchive
	// IgnoreFile is kubectl-tao's own ignore file, read after .gitignore at every level.
	IgnoreFile = ".taoignore"
	// largestShown is how many of the largest entries a size error names.
	largestShown = 5
)

// Entry is one path in the archive.
type Entry struct {
	// Path is slash-separated, relative to DIR.
	Path string
	Type byte // tar.TypeReg, tar.TypeDir or tar.TypeSymlink
	Size int64
	// Exec is set for a regular file with any execute bit.
	Exec bool
	// Target is a symlink's target, as written in the link.
	Target string
}

// Tree is a scanned directory: what will be packed, sorted by path.
type Tree struct {
	Root    string
	Entries []Entry
	// Size is the sum of the regular files' sizes.
	Size int64
}

// Files counts the regular files.
func (t *Tree) Files() int {
	n := 0
	for _, e := range t.Entries {
		if e.Type == tar.TypeReg {
			n++
		}
	}
	return n
}

// TooLargeError says the tree is over the bound, naming its largest files.
type TooLargeError struct {
	Root    string
	Size    int64
	Max     int64
	Largest []Entry
}

func (e *TooLargeError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "--workdir %s holds %s of files (%d bytes), more than --workdir-max-size %s (%d bytes); the largest:",
		e.Root, s3.HumanBytes(e.Size), e.Size, s3.HumanBytes(e.Max), e.Max)
	for _, l := range e.Largest {
		fmt.Fprintf(&b, "\n  %s  %s", s3.HumanBytes(l.Size), l.Path)
	}
	b.WriteString("\nleave them out with a " + IgnoreFile + " (gitignore syntax) in the directory, or raise --workdir-max-size")
	return b.String()
}

// level is the ignore rules of one directory, matched against paths relative to it.
type level struct {
	dir     string // slash-separated, relative to the root; "" for the root
	matcher *ignore.GitIgnore
}

// Scan walks root and lists what Pack would pack, without reading any file's content: the
// size bound is checked here, before a byte is compressed or sent. maxSize <= 0 means no bound.
func Scan(root string, maxSize int64) (*Tree, error) {
	info, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("--workdir: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("--workdir %s: not a directory", root)
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("--workdir: %w", err)
	}
	t := &Tree{Root: root}
	if err := t.walk(realRoot, "", nil); err != nil {
		return nil, err
	}
	slices.SortFunc(t.Entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	if maxSize > 0 && t.Size > maxSize {
		largest := slices.Clone(t.Entries)
		slices.SortStableFunc(largest, func(a, b Entry) int { return cmp.Compare(b.Size, a.Size) })
		largest = largest[:min(largestShown, len(largest))]
		return nil, &TooLargeError{Root: root, Size: t.Size, Max: maxSize, Largest: largest}
	}
	return t, nil
}

// walk adds the entries of the directory rel (relative to realRoot), whose own ignore file
// adds to the levels of its parents.
func (t *Tree) walk(realRoot, rel string, levels []level) error {
	abs := filepath.Join(realRoot, filepath.FromSlash(rel))
	if m, err := readIgnore(abs); err != nil {
		return err
	} else if m != nil {
		levels = append(slices.Clip(levels), level{dir: rel, matcher: m})
	}
	items, err := os.ReadDir(abs)
	if err != nil {
		return fmt.Errorf("--workdir: %w", err)
	}
	for _, it := range items {
		name := it.Name()
		if name == ".git" { // a repository's own data, or a submodule's pointer: never shipped
			continue
		}
		p := path.Join(rel, name)
		full := filepath.Join(abs, name)
		info, err := os.Lstat(full)
		if err != nil {
			return fmt.Errorf("--workdir: %w", err)
		}
		if ignored(levels, p, info.IsDir()) {
			continue
		}
		switch mode := info.Mode(); {
		case mode.IsDir():
			t.Entries = append(t.Entries, Entry{Path: p, Type: tar.TypeDir})
			if err := t.walk(realRoot, p, levels); err != nil {
				return err
			}
		case mode.IsRegular():
			t.Entries = append(t.Entries, Entry{Path: p, Type: tar.TypeReg, Size: info.Size(), Exec: mode&0o111 != 0})
			t.Size += info.Size()
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(full)
			if err != nil {
				return fmt.Errorf("--workdir: %w", err)
			}
			if err := checkLink(realRoot, p, target); err != nil {
				return err
			}
			t.Entries = append(t.Entries, Entry{Path: p, Type: tar.TypeSymlink, Target: target})
		default:
			return fmt.Errorf("--workdir: %s is a %s, not a file, directory or symlink: leave it out with %s", p, mode.Type(), IgnoreFile)
		}
	}
	return nil
}

// checkLink refuses a symlink at p (relative to root) whose target leaves root, lexically or
// once every link on its way is resolved.
func checkLink(realRoot, p, target string) error {
	escape := fmt.Errorf("--workdir: symlink %s -> %s points outside the directory: the pod would not have its target; "+
		"copy the target in, or leave the link out with %s", p, target, IgnoreFile)
	if filepath.IsAbs(target) {
		return escape
	}
	joined := path.Join(path.Dir(p), filepath.ToSlash(target))
	if joined == ".." || strings.HasPrefix(joined, "../") {
		return escape
	}
	resolved, err := filepath.EvalSymlinks(filepath.Join(realRoot, filepath.FromSlash(p)))
	if err != nil {
		return nil // dangling inside the directory: shipped as it is
	}
	if rel, err := filepath.Rel(realRoot, resolved); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return escape
	}
	return nil
}

// readIgnore compiles dir's .gitignore then .taoignore, or returns nil when it has neither.
func readIgnore(dir string) (*ignore.GitIgnore, error) {
	var lines []string
	for _, name := range []string{".gitignore", IgnoreFile} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("--workdir: %w", err)
		}
		lines = append(lines, strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")...)
	}
	if lines == nil {
		return nil, nil
	}
	return ignore.CompileIgnoreLines(lines...), nil
}

// ignored applies the levels from the root down: the deepest level with a pattern that
// matches p decides, as in git (a nested file's rules override its parents').
func ignored(levels []level, p string, dir bool) bool {
	out := false
	for _, l := range levels {
		rel := p
		if l.dir != "" {
			rel = strings.TrimPrefix(p, l.dir+"/")
		}
		if dir {
			rel += "/" // so that "build/" matches the directory build and not a file
		}
		if match, how := l.matcher.MatchesPathHow(rel); how != nil {
			out = match
		}
	}
	return out
}

// Summary describes a packed archive.
type Summary struct {
	Files int
	// Size is the files' uncompressed bytes; Compressed the archive's.
	Size, Compressed int64
	// SHA256 is the hex digest of the archive: what TAO_WORKDIR_SHA256 carries.
	SHA256 string
}

func (s Summary) String() string {
	return fmt.Sprintf("%s, %s (%s compressed), sha256 %s", plural.N(s.Files, "file"), s3.HumanBytes(s.Size), s3.HumanBytes(s.Compressed), s.SHA256)
}

// Pack writes the tree's archive to w, one Write per zstd frame (see frameSize). progress,
// when not nil, is called with the bytes of file content packed so far.
//
// This goroutine reads the files and frames the tar stream while the frames are compressed on
// every core: the encoders are the bottleneck, so a reader goroutine of its own would only add
// a handoff.
func (t *Tree) Pack(w io.Writer, progress func(done int64)) (Summary, error) {
	h := sha256.New()
	var n int64
	fw := newFrameWriter(func(frame []byte) error {
		h.Write(frame)
		n += int64(len(frame))
		if a, ok := w.(*Archive); ok {
			a.keep(frame) // a fresh slice of its own: no copy
			return nil
		}
		_, err := w.Write(frame)
		return err
	})
	err := t.writeTar(fw, progress)
	if cerr := fw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Summary{}, err
	}
	return Summary{Files: t.Files(), Size: t.Size, Compressed: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// writeTar writes the tree's tar stream (uncompressed) to w.
func (t *Tree) writeTar(w io.Writer, progress func(done int64)) error {
	tw := tar.NewWriter(w)
	var done int64
	for _, e := range t.Entries {
		hdr := &tar.Header{Name: e.Path, Typeflag: e.Type, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		switch e.Type {
		case tar.TypeDir:
			hdr.Name += "/"
			hdr.Mode = 0o755
		case tar.TypeSymlink:
			hdr.Mode = 0o777
			hdr.Linkname = e.Target
		case tar.TypeReg:
			hdr.Mode, hdr.Size = 0o644, e.Size
			if e.Exec {
				hdr.Mode = 0o755
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if e.Type == tar.TypeReg {
			if err := copyFile(tw, filepath.Join(t.Root, filepath.FromSlash(e.Path)), e); err != nil {
				return err
			}
			done += e.Size
			if progress != nil {
				progress(done)
			}
		}
	}
	return tw.Close()
}

// copyFile writes exactly the size Scan saw: a file that changed in between fails the pack
// rather than producing an archive that disagrees with its own header.
func copyFile(w io.Writer, name string, e Entry) error {
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("--workdir: %w", err)
	}
	defer f.Close()
	n, err := io.Copy(w, io.LimitReader(f, e.Size))
	if err != nil {
		return fmt.Errorf("--workdir: reading %s: %w", e.Path, err)
	}
	if extra, _ := f.Read(make([]byte, 1)); n != e.Size || extra != 0 {
		return fmt.Errorf("--workdir: %s changed while it was packed: pack again", e.Path)
	}
	return nil
}
