// Command release packs one platform's archive, writes sha256sums.txt and renders the krew
// manifest; `make dist` and `make krew-manifest` run it.
//
//	release pack -out dist/kubectl-tao_linux_amd64.tar.gz -mtime 1700000000 NAME=SRC[:MODE]...
//	release sums -dir dist
//	release krew-manifest -template .krew.yaml -tag v1.2.3 -dist dist -out dist/krew/tao.yaml
//	release krew-manifest -template .krew.yaml -tag v1.2.3 -sums krew/sha256sums.txt -out krew/tao.yaml
//	release krew-manifest -template .krew.yaml -tag v1.2.3 -unreleased -out krew/tao.yaml
//	release oci-image -out dist/kubectl-tao-stager.oci.tar -ref REPO:TAG -mtime 1700000000 linux/amd64=BINARY...
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kubectl-tao/kubectl-tao/hack/release"
)

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: release pack|sums|krew-manifest|oci-image [flags]"))
	}
	var err error
	switch os.Args[1] {
	case "pack":
		err = pack(os.Args[2:])
	case "sums":
		err = sums(os.Args[2:])
	case "krew-manifest":
		err = manifest(os.Args[2:])
	case "oci-image":
		err = ociImage(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "release:", err)
	os.Exit(1)
}

func pack(args []string) error {
	fs := flag.NewFlagSet("pack", flag.ExitOnError)
	out := fs.String("out", "", "archive to write")
	mtime := fs.Int64("mtime", 0, "modification time of every entry (Unix seconds; the commit's time)")
	_ = fs.Parse(args)
	if *out == "" || fs.NArg() == 0 {
		return fmt.Errorf("pack: -out and NAME=SRC[:MODE] arguments are required")
	}
	var files []release.File
	for _, a := range fs.Args() {
		name, src, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("pack: %q is not NAME=SRC[:MODE]", a)
		}
		mode := int64(0o644)
		if s, m, ok := strings.Cut(src, ":"); ok {
			v, err := strconv.ParseInt(m, 8, 64)
			if err != nil {
				return fmt.Errorf("pack: mode of %q: %w", a, err)
			}
			src, mode = s, v
		}
		files = append(files, release.File{Name: name, Source: src, Mode: mode})
	}
	var b bytes.Buffer
	if err := release.Pack(&b, files, time.Unix(*mtime, 0)); err != nil {
		return err
	}
	return os.WriteFile(*out, b.Bytes(), 0o644)
}

func sums(args []string) error {
	fs := flag.NewFlagSet("sums", flag.ExitOnError)
	dir := fs.String("dir", "dist", "directory of the archives")
	_ = fs.Parse(args)
	s, err := release.Sums(*dir, ".tar.gz", ".zip")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(*dir, "sha256sums.txt"), []byte(s), 0o644)
}

func manifest(args []string) error {
	fs := flag.NewFlagSet("krew-manifest", flag.ExitOnError)
	tmpl := fs.String("template", ".krew.yaml", "krew-release-bot template")
	tag := fs.String("tag", "", "the release tag (the version)")
	dist := fs.String("dist", "", "hash the archives in this directory")
	sumsFile := fs.String("sums", "", "take the sums from this sha256sums.txt (a published release's)")
	unreleased := fs.Bool("unreleased", false, "no archives published yet: placeholder sums")
	header := fs.String("header", "", "comment lines written before the manifest")
	out := fs.String("out", "krew/tao.yaml", "manifest to write")
	_ = fs.Parse(args)
	if *tag == "" {
		return fmt.Errorf("krew-manifest: -tag is required")
	}
	var sum release.ArchiveSum
	switch {
	case *dist != "" && *sumsFile == "" && !*unreleased:
		sum = release.SumsInDir(*dist)
	case *sumsFile != "" && *dist == "" && !*unreleased:
		s, err := release.SumsFromFile(*sumsFile)
		if err != nil {
			return err
		}
		sum = s
	case *unreleased && *dist == "" && *sumsFile == "":
		sum = release.PlaceholderSums
	default:
		return fmt.Errorf("krew-manifest: exactly one of -dist, -sums and -unreleased is required")
	}
	t, err := os.ReadFile(*tmpl)
	if err != nil {
		return err
	}
	m, err := release.RenderManifest(t, *tag, sum)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if *header != "" {
		for _, l := range strings.Split(strings.TrimRight(*header, "\n"), "\n") {
			b.WriteString(strings.TrimRight("# "+l, " ") + "\n")
		}
	}
	b.Write(m)
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(*out, b.Bytes(), 0o644)
}

// ociImage writes the stager image: FROM scratch, the binary at /kubectl-tao.
func ociImage(args []string) error {
	fs := flag.NewFlagSet("oci-image", flag.ExitOnError)
	out := fs.String("out", "", "OCI archive to write")
	ref := fs.String("ref", "", "image reference, REPOSITORY:TAG")
	mtime := fs.Int64("mtime", 0, "creation time of the image and its files (Unix seconds; the commit's time)")
	version := fs.String("version", "", "org.opencontainers.image.version label")
	_ = fs.Parse(args)
	if *out == "" || *ref == "" || fs.NArg() == 0 {
		return fmt.Errorf("oci-image: -out, -ref and OS/ARCH=BINARY arguments are required")
	}
	var bins []release.ImageBinary
	for _, a := range fs.Args() {
		plat, path, ok := strings.Cut(a, "=")
		goos, arch, ok2 := strings.Cut(plat, "/")
		if !ok || !ok2 {
			return fmt.Errorf("oci-image: %q is not OS/ARCH=BINARY", a)
		}
		bins = append(bins, release.ImageBinary{OS: goos, Arch: arch, Path: path})
	}
	labels := map[string]string{
		"org.opencontainers.image.source":      "https://github.com/kubectl-tao/kubectl-tao",
		"org.opencontainers.image.description": "kubectl-tao's S3 stager: the static kubectl-tao binary at /kubectl-tao",
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}
	if *version != "" {
		labels["org.opencontainers.image.version"] = *version
	}
	var b bytes.Buffer
	err := release.OCIImage(&b, bins, release.ImageOptions{
		Ref: *ref, BinaryPath: "/kubectl-tao", User: "65532:65532", Created: time.Unix(*mtime, 0), Labels: labels,
	})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(*out, b.Bytes(), 0o644)
}
