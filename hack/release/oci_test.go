package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// readTar returns a tar's regular files by name, failing on anything unexpected.
func readTar(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeDir {
			continue
		}
		b, _ := io.ReadAll(tr)
		out[h.Name] = b
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" {
			t.Errorf("%s: owner %d:%d %q", h.Name, h.Uid, h.Gid, h.Uname)
		}
	}
}

func unmarshal(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
}

// blob returns the blob a descriptor names, checking its digest and size.
func blob(t *testing.T, files map[string][]byte, d descriptor) []byte {
	t.Helper()
	b, ok := files[blobPath(d.Digest)]
	sum := sha256.Sum256(b)
	if !ok || "sha256:"+hex.EncodeToString(sum[:]) != d.Digest || int64(len(b)) != d.Size {
		t.Fatalf("blob %s missing or not matching its digest and size", d.Digest)
	}
	return b
}

// checkManifest follows a manifest to its config and layer and checks the image holds exactly
// the binary, executable, at /kubectl-tao.
func checkManifest(t *testing.T, files map[string][]byte, d descriptor, wantBinary []byte, arch string) {
	t.Helper()
	var m manifest
	unmarshal(t, blob(t, files, d), &m)
	var cfg imageConfig
	unmarshal(t, blob(t, files, m.Config), &cfg)
	if cfg.Architecture != arch || cfg.OS != "linux" || strings.Join(cfg.Config.Entrypoint, " ") != "/kubectl-tao" || cfg.Config.User != "65532:65532" {
		t.Errorf("config = %+v", cfg)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, m.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	layer, _ := io.ReadAll(zr)
	sum := sha256.Sum256(layer)
	if len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("diff_ids %v do not match the layer", cfg.RootFS.DiffIDs)
	}
	tr := tar.NewReader(bytes.NewReader(layer))
	h, err := tr.Next()
	if err != nil || h.Name != "kubectl-tao" || h.Mode != 0o755 || h.Typeflag != tar.TypeReg {
		t.Fatalf("layer entry = %+v, %v", h, err)
	}
	got, _ := io.ReadAll(tr)
	if !bytes.Equal(got, wantBinary) {
		t.Error("the layer's binary differs from the input")
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Error("the layer holds more than the binary")
	}
}

func writeBin(t *testing.T, name, content string) string {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOCIImageSinglePlatform(t *testing.T) {
	bin := writeBin(t, "kubectl-tao", "\x7fELF amd64 binary")
	opts := ImageOptions{Ref: "localhost:5000/kubectl-tao:v1.2.3", BinaryPath: "/kubectl-tao", User: "65532:65532",
		Created: time.Unix(1700000000, 0), Labels: map[string]string{"org.opencontainers.image.version": "v1.2.3"}}
	var a, b bytes.Buffer
	if err := OCIImage(&a, []ImageBinary{{"linux", "amd64", bin}}, opts); err != nil {
		t.Fatal(err)
	}
	if err := OCIImage(&b, []ImageBinary{{"linux", "amd64", bin}}, opts); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two builds differ")
	}
	files := readTar(t, a.Bytes())
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %s", files["oci-layout"])
	}
	var idx index
	unmarshal(t, files["index.json"], &idx)
	if len(idx.Manifests) != 1 || idx.Manifests[0].MediaType != mediaManifest ||
		idx.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "v1.2.3" ||
		idx.Manifests[0].Annotations["io.containerd.image.name"] != "localhost:5000/kubectl-tao:v1.2.3" {
		t.Fatalf("index.json = %s", files["index.json"])
	}
	checkManifest(t, files, idx.Manifests[0], []byte("\x7fELF amd64 binary"), "amd64")
	var docker []dockerManifest
	unmarshal(t, files["manifest.json"], &docker)
	if len(docker) != 1 || docker[0].RepoTags[0] != opts.Ref || files[docker[0].Config] == nil || files[docker[0].Layers[0]] == nil {
		t.Errorf("manifest.json = %s", files["manifest.json"])
	}
}

func TestOCIImageMultiPlatform(t *testing.T) {
	bins := []ImageBinary{{"linux", "amd64", writeBin(t, "a", "amd64 bits")}, {"linux", "arm64", writeBin(t, "b", "arm64 bits")}}
	var buf bytes.Buffer
	if err := OCIImage(&buf, bins, ImageOptions{Ref: "ghcr.io/kubectl-tao/kubectl-tao:v1.2.3", BinaryPath: "/kubectl-tao", User: "65532:65532"}); err != nil {
		t.Fatal(err)
	}
	files := readTar(t, buf.Bytes())
	var top, inner index
	unmarshal(t, files["index.json"], &top)
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != mediaIndex {
		t.Fatalf("index.json = %s", files["index.json"])
	}
	unmarshal(t, blob(t, files, top.Manifests[0]), &inner)
	if len(inner.Manifests) != 2 {
		t.Fatalf("inner index = %+v", inner)
	}
	for i, arch := range []string{"amd64", "arm64"} {
		if p := inner.Manifests[i].Platform; p == nil || p.Architecture != arch || p.OS != "linux" {
			t.Errorf("manifest %d platform = %+v", i, p)
		}
		checkManifest(t, files, inner.Manifests[i], []byte(arch+" bits"), arch)
	}
	if _, ok := files["manifest.json"]; ok {
		t.Error("a multi-platform archive has a docker manifest.json (it can describe one platform only)")
	}
}

func TestOCIImageRefs(t *testing.T) {
	for ref, ok := range map[string]bool{
		"ghcr.io/kubectl-tao/kubectl-tao:v1": true, "localhost:5000/x:t": true, "x:t": true,
		"localhost:5000/x": false, "x": false, "x:": false, "x@sha256:ab": false,
	} {
		if _, _, got := splitRef(ref); got != ok {
			t.Errorf("splitRef(%q) ok = %v", ref, got)
		}
	}
}

// TestOCIRootfsImageSrcAndModTime: an entry's content can come from a host file (Src), read
// when the layer is written, and a file keeps its own mtime where it has one.
func TestOCIRootfsImageSrcAndModTime(t *testing.T) {
	src := writeBin(t, "lib.so", "library bytes")
	created := time.Unix(0, 0)
	own := time.Unix(1678800000, 700) // sub-second part dropped
	entries := []LayerEntry{
		{Path: "usr/lib/lib.so", Mode: 0o644, Src: src, ModTime: own},
		{Path: "etc/x", Mode: 0o644, Data: []byte("inline")},
		{Path: "usr/lib/missing.so", Mode: 0o644, Src: filepath.Join(t.TempDir(), "absent")},
	}
	opts := RootfsImageOptions{Ref: "docker.io/local/x:1", OS: "linux", Arch: "amd64", Created: created}
	if err := OCIRootfsImage(io.Discard, entries, opts); err == nil || !strings.Contains(err.Error(), "usr/lib/missing.so") {
		t.Fatalf("a missing Src file: err = %v, want one naming the entry", err)
	}
	var buf bytes.Buffer
	if err := OCIRootfsImage(&buf, entries[:2], opts); err != nil {
		t.Fatal(err)
	}
	files := readTar(t, buf.Bytes())
	var idx index
	unmarshal(t, files["index.json"], &idx)
	var m manifest
	unmarshal(t, blob(t, files, idx.Manifests[0]), &m)
	tr := tar.NewReader(bytes.NewReader(blob(t, files, m.Layers[0])))
	got := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(b) + " @" + h.ModTime.UTC().Format(time.RFC3339Nano)
	}
	want := map[string]string{
		"usr/lib/lib.so": "library bytes @2023-03-14T13:20:00Z",
		"etc/x":          "inline @1970-01-01T00:00:00Z",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}
