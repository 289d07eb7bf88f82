package workdir

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// Checksum is the hex SHA-256 of the file at name.
func Checksum(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Unpack checks that the archive at name has the SHA-256 want, then unpacks it into dest
// (created if missing). The check comes first, so that a rank never runs code other than the
// snapshot submit named. Only what Pack writes is accepted: relative paths that stay in dest,
// directories, regular files and symlinks whose targets stay in dest, nothing written through
// a symlink.
func Unpack(name, dest, want string) (Summary, error) {
	got, err := Checksum(name)
	if err != nil {
		return Summary{}, err
	}
	if got != want {
		return Summary{}, fmt.Errorf("workdir archive %s has sha256 %s, not the %s submit recorded: refusing to unpack it", name, got, want)
	}
	f, err := os.Open(name)
	if err != nil {
		return Summary{}, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return Summary{}, err
	}
	zr, err := zstd.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return Summary{}, err
	}
	defer zr.Close()
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return Summary{}, err
	}
	sum := Summary{SHA256: got, Compressed: info.Size()}
	links := map[string]bool{} // symlinks made so far, never written through
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return sum, nil
		}
		if err != nil {
			return sum, fmt.Errorf("reading workdir archive: %w", err)
		}
		p := path.Clean(strings.TrimSuffix(hdr.Name, "/"))
		if p == "." || path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
			return sum, fmt.Errorf("workdir archive: entry %q leaves the directory", hdr.Name)
		}
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if links[d] {
				return sum, fmt.Errorf("workdir archive: entry %q lies below the symlink %s", hdr.Name, d)
			}
		}
		target := filepath.Join(dest, filepath.FromSlash(p))
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o755)
		case tar.TypeReg:
			err = writeFile(target, tr, hdr)
			sum.Files++
			sum.Size += hdr.Size
		case tar.TypeSymlink:
			joined := path.Join(path.Dir(p), hdr.Linkname)
			if path.IsAbs(hdr.Linkname) || joined == ".." || strings.HasPrefix(joined, "../") {
				return sum, fmt.Errorf("workdir archive: symlink %s -> %s leaves the directory", p, hdr.Linkname)
			}
			links[p] = true
			err = os.Symlink(hdr.Linkname, target)
		default:
			return sum, fmt.Errorf("workdir archive: entry %q has type %q, which kubectl-tao never packs", hdr.Name, hdr.Typeflag)
		}
		if err != nil {
			return sum, fmt.Errorf("unpacking %s: %w", p, err)
		}
	}
}

func writeFile(target string, r io.Reader, hdr *tar.Header) error {
	mode := os.FileMode(0o644)
	if hdr.Mode&0o111 != 0 {
		mode = 0o755
	}
	// O_EXCL: a name given twice, or a file already there, is an error, not an overwrite.
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
