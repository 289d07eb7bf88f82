package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// The stager image: FROM scratch, the static kubectl-tao binary at /kubectl-tao and nothing
// else, written as an OCI image layout in a tar (what `skopeo copy oci-archive:`, `docker load`
// (25+) and, after unpacking, `crane push` read) by the standard library alone: no docker
// engine, no registry, no base image to fetch. ko cannot make it: it puts the binary at
// /ko-app/NAME and pulls a base image.

// Media types of the OCI image spec.
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
	// mediaLayerTar is an uncompressed layer: the local cluster's test images are imported
	// straight into containerd, where compressing buys nothing and costs seconds.
	mediaLayerTar = "application/vnd.oci.image.layer.v1.tar"
)

// ImageBinary is the binary for one platform of the image.
type ImageBinary struct {
	OS, Arch string
	// Path is the static binary on disk.
	Path string
}

// ImageOptions name the image and fix what would otherwise vary between builds.
type ImageOptions struct {
	// Ref is the full reference, REPOSITORY:TAG.
	Ref string
	// BinaryPath is where the binary goes in the image, e.g. /kubectl-tao.
	BinaryPath string
	// User the image runs as ("65532:65532": no root needed to copy a file into an emptyDir).
	User string
	// Created is the image's creation time and every file's mtime (the commit's time).
	Created time.Time
	// Labels become the config's labels (org.opencontainers.image.*).
	Labels map[string]string
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type imageConfig struct {
	Created      string `json:"created"`
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		User       string            `json:"User,omitempty"`
		Env        []string          `json:"Env,omitempty"`
		Entrypoint []string          `json:"Entrypoint"`
		Cmd        []string          `json:"Cmd,omitempty"`
		Labels     map[string]string `json:"Labels,omitempty"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []struct {
		Created   string `json:"created"`
		CreatedBy string `json:"created_by"`
	} `json:"history"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Manifests     []descriptor      `json:"manifests"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// dockerManifest is docker's own archive index (manifest.json), for `docker load` before 25
// and `crane push IMAGE.tar`; it can describe one platform only.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// blobs collects content-addressed files.
type blobs map[string][]byte

func (b blobs) add(mediaType string, data []byte) descriptor {
	sum := sha256.Sum256(data)
	d := "sha256:" + hex.EncodeToString(sum[:])
	b[d] = data
	return descriptor{MediaType: mediaType, Digest: d, Size: int64(len(data))}
}

// addImage adds the config (cfg with its one-layer rootfs and a history line) and the manifest
// of a one-layer image, returning the manifest's descriptor, with its platform, and the config's.
func (b blobs) addImage(cfg imageConfig, layer descriptor, diffID, createdBy string) (md, config descriptor, err error) {
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []string{diffID}
	cfg.History = append(cfg.History, struct {
		Created   string `json:"created"`
		CreatedBy string `json:"created_by"`
	}{cfg.Created, createdBy})
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return md, config, err
	}
	config = b.add(mediaConfig, cfgJSON)
	m, err := json.Marshal(manifest{SchemaVersion: 2, MediaType: mediaManifest, Config: config, Layers: []descriptor{layer}})
	if err != nil {
		return md, config, err
	}
	md = b.add(mediaManifest, m)
	md.Platform = &platform{Architecture: cfg.Architecture, OS: cfg.OS}
	return md, config, nil
}

func blobPath(digest string) string { return "blobs/" + strings.Replace(digest, ":", "/", 1) }

// OCIImage writes the image as an OCI layout tar to w. One binary gives index.json pointing at
// its manifest (and a docker manifest.json); several give index.json pointing at an image
// index of one manifest per platform, what `skopeo copy --all` pushes as a multi-arch image.
// The bytes depend only on the binaries and opts.
func OCIImage(w io.Writer, bins []ImageBinary, opts ImageOptions) error {
	if len(bins) == 0 {
		return fmt.Errorf("oci-image: no binaries")
	}
	repo, tag, ok := splitRef(opts.Ref)
	if !ok {
		return fmt.Errorf("oci-image: %q is not REPOSITORY:TAG", opts.Ref)
	}
	created := opts.Created.UTC().Truncate(time.Second)
	b := blobs{}
	var manifests []descriptor
	var docker []dockerManifest
	for _, bin := range bins {
		data, err := os.ReadFile(bin.Path)
		if err != nil {
			return fmt.Errorf("oci-image: %w", err)
		}
		layerTar, err := tarOf(strings.TrimPrefix(opts.BinaryPath, "/"), data, created)
		if err != nil {
			return err
		}
		diff := sha256.Sum256(layerTar)
		layerGz, err := gzipped(layerTar)
		if err != nil {
			return err
		}
		layer := b.add(mediaLayer, layerGz)

		var cfg imageConfig
		cfg.Created = created.Format(time.RFC3339)
		cfg.Architecture, cfg.OS = bin.Arch, bin.OS
		cfg.Config.User = opts.User
		cfg.Config.Entrypoint = []string{opts.BinaryPath}
		cfg.Config.Labels = opts.Labels
		md, config, err := b.addImage(cfg, layer, "sha256:"+hex.EncodeToString(diff[:]), "make stager-image: "+opts.BinaryPath)
		if err != nil {
			return err
		}
		manifests = append(manifests, md)
		docker = append(docker, dockerManifest{Config: blobPath(config.Digest), RepoTags: []string{opts.Ref}, Layers: []string{blobPath(layer.Digest)}})
	}

	names := map[string]string{
		"org.opencontainers.image.ref.name": tag,
		"io.containerd.image.name":          repo + ":" + tag,
	}
	top := index{SchemaVersion: 2, MediaType: mediaIndex}
	if len(manifests) == 1 {
		m := manifests[0]
		m.Annotations = names
		top.Manifests = []descriptor{m}
	} else {
		inner, err := json.Marshal(index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: manifests})
		if err != nil {
			return err
		}
		d := b.add(mediaIndex, inner)
		d.Annotations = names
		top.Manifests = []descriptor{d}
		docker = nil
	}

	files := map[string][]byte{"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`)}
	var err error
	if files["index.json"], err = json.Marshal(top); err != nil {
		return err
	}
	if docker != nil {
		if files["manifest.json"], err = json.Marshal(docker); err != nil {
			return err
		}
	}
	for d, data := range b {
		files[blobPath(d)] = data
	}
	return writeTar(w, files, created)
}

// splitRef splits REPOSITORY:TAG at the tag's colon (a registry port has a "/" after it).
func splitRef(ref string) (repo, tag string, ok bool) {
	i := strings.LastIndex(ref, ":")
	if i <= 0 || i == len(ref)-1 || strings.Contains(ref[i:], "/") || strings.ContainsAny(ref, " \t\n@") {
		return "", "", false
	}
	return ref[:i], ref[i+1:], true
}

// tarOf is a layer holding one executable file, root-owned, mode 0755.
func tarOf(name string, data []byte, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatUSTAR}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// gzipped compresses without a name or time in the header, so the bytes depend on data only.
func gzipped(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeTar writes files sorted by name, with the directories their paths need.
func writeTar(w io.Writer, files map[string][]byte, mtime time.Time) error {
	names := make([]string, 0, len(files))
	dirs := map[string]bool{}
	for n := range files {
		names = append(names, n)
		for p := n; strings.Contains(p, "/"); {
			p = p[:strings.LastIndex(p, "/")]
			dirs[p+"/"] = true
		}
	}
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names)
	tw := tar.NewWriter(w)
	for _, n := range names {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(files[n])), ModTime: mtime, Format: tar.FormatUSTAR}
		if strings.HasSuffix(n, "/") {
			hdr = &tar.Header{Typeflag: tar.TypeDir, Name: n, Mode: 0o755, ModTime: mtime, Format: tar.FormatUSTAR}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(files[n]); err != nil {
			return err
		}
	}
	return tw.Close()
}

// LayerEntry is one file, directory or symlink of a rootfs layer.
type LayerEntry struct {
	// Path is relative to the image root, without a leading slash ("bin/sh").
	Path string
	Mode int64
	// Data is a regular file's content.
	Data []byte
	// Src, instead of Data, names a host file whose content is read while the layer is written,
	// so an image of hundreds of megabytes of host files is not held in memory twice.
	Src string
	// ModTime is a regular file's mtime, truncated to the second; zero means the image's Created.
	// Python checks its cached bytecode against its sources' mtimes: an image of Python files
	// keeps theirs, or every start recompiles them.
	ModTime time.Time
	// Link makes the entry a symlink to Link.
	Link string
	Dir  bool
}

// RootfsImageOptions describe an image made of one rootfs layer.
type RootfsImageOptions struct {
	// Ref is the full reference, REPOSITORY:TAG (e.g. docker.io/local/tao-test:1).
	Ref        string
	OS, Arch   string
	Env        []string
	Entrypoint []string
	Cmd        []string
	// Created is the image's creation time and every entry's mtime.
	Created   time.Time
	CreatedBy string
}

// OCIRootfsImage writes a one-platform image whose single layer holds entries, as an OCI
// layout tar (what `ctr images import` reads). Entries are written sorted by path, root-owned,
// with opts.Created as their mtime, so the bytes depend only on entries and opts.
func OCIRootfsImage(w io.Writer, entries []LayerEntry, opts RootfsImageOptions) error {
	repo, tag, ok := splitRef(opts.Ref)
	if !ok {
		return fmt.Errorf("oci-image: %q is not REPOSITORY:TAG", opts.Ref)
	}
	created := opts.Created.UTC().Truncate(time.Second)
	sorted := append([]LayerEntry(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	// Sized up front: growing a buffer of hundreds of MB by doubling would hold it twice.
	size := 1024
	for _, e := range sorted {
		size += 1536 + len(e.Data)
		if fi, err := os.Stat(e.Src); e.Src != "" && err == nil {
			size += int(fi.Size())
		}
	}
	var buf bytes.Buffer
	buf.Grow(size)
	tw := tar.NewWriter(&buf)
	for _, e := range sorted {
		data := e.Data
		if e.Src != "" {
			var err error
			if data, err = os.ReadFile(e.Src); err != nil {
				return fmt.Errorf("oci-image: %s: %w", e.Path, err)
			}
		}
		mtime := created
		if !e.ModTime.IsZero() {
			mtime = e.ModTime.UTC().Truncate(time.Second)
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: e.Path, Mode: e.Mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}
		switch {
		case e.Dir:
			hdr = &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimSuffix(e.Path, "/") + "/", Mode: e.Mode, ModTime: created, Format: tar.FormatPAX}
		case e.Link != "":
			hdr = &tar.Header{Typeflag: tar.TypeSymlink, Name: e.Path, Linkname: e.Link, Mode: 0o777, ModTime: created, Format: tar.FormatPAX}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("oci-image: %s: %w", e.Path, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write(data); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	b := blobs{}
	layer := b.add(mediaLayerTar, buf.Bytes())
	var cfg imageConfig
	cfg.Created = created.Format(time.RFC3339)
	cfg.Architecture, cfg.OS = opts.Arch, opts.OS
	cfg.Config.Env, cfg.Config.Entrypoint, cfg.Config.Cmd = opts.Env, opts.Entrypoint, opts.Cmd
	// An uncompressed layer's diff ID is its digest.
	md, _, err := b.addImage(cfg, layer, layer.Digest, opts.CreatedBy)
	if err != nil {
		return err
	}
	md.Annotations = map[string]string{"org.opencontainers.image.ref.name": tag, "io.containerd.image.name": repo + ":" + tag}
	top, err := json.Marshal(index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: []descriptor{md}})
	if err != nil {
		return err
	}
	files := map[string][]byte{"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`), "index.json": top}
	for d, data := range b {
		files[blobPath(d)] = data
	}
	return writeTar(w, files, created)
}

// ImageName returns the name (io.containerd.image.name) an OCI layout tar made by OCIImage
// or OCIRootfsImage gives its image.
func ImageName(archive io.Reader) (string, error) {
	tr := tar.NewReader(archive)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return "", fmt.Errorf("no index.json in the archive")
		}
		if err != nil {
			return "", err
		}
		if h.Name != "index.json" {
			continue
		}
		var idx index
		if err := json.NewDecoder(tr).Decode(&idx); err != nil {
			return "", fmt.Errorf("parse index.json: %w", err)
		}
		for _, m := range idx.Manifests {
			if n := m.Annotations["io.containerd.image.name"]; n != "" {
				return n, nil
			}
		}
		return "", fmt.Errorf("index.json names no image")
	}
}
