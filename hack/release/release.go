// Package release packs the release archives, their checksums and the krew manifest. Every
// output is a function of its inputs only (file contents, a fixed modification time), so two
// builds of one commit give identical bytes.
package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"text/template"
	"time"
)

// File is one entry of an archive.
type File struct {
	// Name is the path inside the archive.
	Name string
	// Source is the file on disk to copy.
	Source string
	// Mode is the permission bits recorded in the archive (0755 for executables).
	Mode int64
}

// Pack writes a gzip-compressed tar of files to w. Entries are sorted by name and carry mtime,
// uid/gid 0 and no user or group names; the gzip header has no name or time: the bytes depend
// only on the contents.
func Pack(w io.Writer, files []File, mtime time.Time) error {
	files = append([]File(nil), files...)
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	zw, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	for _, f := range files {
		data, err := os.ReadFile(f.Source)
		if err != nil {
			return fmt.Errorf("packing %s: %w", f.Name, err)
		}
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     f.Name,
			Mode:     f.Mode,
			Size:     int64(len(data)),
			ModTime:  mtime.UTC().Truncate(time.Second),
			Format:   tar.FormatUSTAR,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("packing %s: %w", f.Name, err)
		}
		if _, err := tw.Write(data); err != nil {
			return fmt.Errorf("packing %s: %w", f.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// SHA256File returns the hex SHA-256 of a file.
func SHA256File(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Sums returns the sha256sum(1) listing ("<hex>  <name>\n", sorted by name) of the files in dir
// whose names end in one of exts, so that `sha256sum -c` checks them.
func Sums(dir string, exts ...string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, e := range entries { // os.ReadDir sorts by name
		if e.IsDir() || !hasSuffix(e.Name(), exts) {
			continue
		}
		sum, err := SHA256File(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, e.Name())
	}
	if b.Len() == 0 {
		return "", fmt.Errorf("no archives (%s) in %s", strings.Join(exts, ", "), dir)
	}
	return b.String(), nil
}

func hasSuffix(s string, suffixes []string) bool {
	for _, x := range suffixes {
		if strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}

// ArchiveSum returns the hex SHA-256 of the release archive of that file name
// ("kubectl-tao_linux_amd64.tar.gz").
type ArchiveSum func(archive string) (string, error)

// SumsInDir hashes the archives in dir: the manifest then matches the archives just built.
func SumsInDir(dir string) ArchiveSum {
	return func(archive string) (string, error) {
		return SHA256File(filepath.Join(dir, archive))
	}
}

// SumsFromFile reads a published sha256sums.txt ("<hex>  <name>" lines, as Sums writes it).
func SumsFromFile(name string) (ArchiveSum, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	sums := map[string]string{}
	for i, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		sum, file, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != sha256.Size*2 || strings.Trim(sum, "0123456789abcdef") != "" || file == "" {
			return nil, fmt.Errorf("%s:%d: not a sha256sum line: %q", name, i+1, line)
		}
		sums[file] = sum
	}
	return func(archive string) (string, error) {
		if sum, ok := sums[archive]; ok {
			return sum, nil
		}
		return "", fmt.Errorf("%s lists no %s", name, archive)
	}, nil
}

// Placeholder is the sha256 of a manifest rendered before its archives are published: well
// formed, so the manifest validates, but no archive has it, so nothing installs from it.
const Placeholder = "0000000000000000000000000000000000000000000000000000000000000000"

// PlaceholderSums gives every archive the Placeholder sum.
func PlaceholderSums(string) (string, error) { return Placeholder, nil }

// RenderManifest renders a krew-release-bot template (.krew.yaml) as the bot does for a
// release tagged tag, except that `addURIAndSha` takes the archive's sum from sum (by the
// URL's file name) instead of downloading the URL.
func RenderManifest(tmpl []byte, tag string, sum ArchiveSum) ([]byte, error) {
	funcs := template.FuncMap{
		"addURIAndSha": func(url, tag string) (string, error) {
			u, err := execute("url", url, tag, nil)
			if err != nil {
				return "", err
			}
			s, err := sum(path.Base(u))
			if err != nil {
				return "", fmt.Errorf("addURIAndSha %s: %w", u, err)
			}
			// The bot's exact output: the sha256 line is indented for a platform entry. A sum of
			// digits only (the Placeholder) is quoted, or YAML would read it as a number.
			if strings.Trim(s, "0123456789") == "" {
				s = `"` + s + `"`
			}
			return fmt.Sprintf("uri: %s\n    sha256: %s", u, s), nil
		},
	}
	out, err := execute(".krew.yaml", string(tmpl), tag, funcs)
	if err != nil {
		return nil, err
	}
	return []byte(out), nil
}

func execute(name, text, tag string, funcs template.FuncMap) (string, error) {
	t := template.New(name).Option("missingkey=error")
	if funcs != nil {
		t = t.Funcs(funcs)
	}
	t, err := t.Parse(text)
	if err != nil {
		return "", fmt.Errorf("parsing %s: %w", name, err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, struct{ TagName string }{tag}); err != nil {
		return "", fmt.Errorf("rendering %s: %w", name, err)
	}
	return b.String(), nil
}
