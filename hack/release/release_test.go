package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPackIsReproducibleAndSorted(t *testing.T) {
	dir := t.TempDir()
	bin := write(t, dir, "bin", "binary")
	lic := write(t, dir, "lic", "license")
	mtime := time.Unix(1700000000, 0)
	var a, b bytes.Buffer
	if err := Pack(&a, []File{{"kubectl-tao", bin, 0o755}, {"LICENSE", lic, 0o644}}, mtime); err != nil {
		t.Fatal(err)
	}
	// Different order and a later wall clock: the same bytes.
	if err := os.Chtimes(bin, time.Now(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := Pack(&b, []File{{"LICENSE", lic, 0o644}, {"kubectl-tao", bin, 0o755}}, mtime); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two packs of the same files differ")
	}
	zr, err := gzip.NewReader(&a)
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header carries name %q, time %v", zr.Name, zr.ModTime)
	}
	tr := tar.NewReader(zr)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		got = append(got, h.Name+":"+string(data))
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(mtime) {
			t.Errorf("%s: uid %d gid %d %q %q mtime %v", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
		if want := map[string]int64{"kubectl-tao": 0o755, "LICENSE": 0o644}[h.Name]; h.Mode != want {
			t.Errorf("%s: mode %o, want %o", h.Name, h.Mode, want)
		}
	}
	if strings.Join(got, ",") != "LICENSE:license,kubectl-tao:binary" {
		t.Errorf("entries %v", got)
	}
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestSumsListsArchivesSorted(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "b_linux.tar.gz", "b")
	write(t, dir, "a_darwin.tar.gz", "a")
	write(t, dir, "sha256sums.txt", "old")
	got, err := Sums(dir, ".tar.gz")
	if err != nil {
		t.Fatal(err)
	}
	want := sum("a") + "  a_darwin.tar.gz\n" + sum("b") + "  b_linux.tar.gz\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if _, err := Sums(t.TempDir(), ".tar.gz"); err == nil {
		t.Error("an empty directory gave no error")
	}
}

func TestRenderManifestLikeKrewReleaseBot(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "kubectl-tao_linux_amd64.tar.gz", "archive")
	tmpl := `spec:
  version: {{ .TagName }}
  platforms:
  - selector: {}
    {{ addURIAndSha "https://example.com/download/{{ .TagName }}/kubectl-tao_linux_amd64.tar.gz" .TagName }}
    bin: kubectl-tao
`
	got, err := RenderManifest([]byte(tmpl), "v1.2.3", SumsInDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	want := `spec:
  version: v1.2.3
  platforms:
  - selector: {}
    uri: https://example.com/download/v1.2.3/kubectl-tao_linux_amd64.tar.gz
    sha256: ` + sum("archive") + `
    bin: kubectl-tao
`
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	missing := strings.Replace(tmpl, "linux_amd64", "linux_arm64", 1)
	if _, err := RenderManifest([]byte(missing), "v1.2.3", SumsInDir(dir)); err == nil || !strings.Contains(err.Error(), "kubectl-tao_linux_arm64.tar.gz") {
		t.Errorf("a missing archive: err %v", err)
	}
}

// The committed template must render with the repository's archive names for all platforms.
func TestKrewTemplateNamesEveryPlatform(t *testing.T) {
	tmpl, err := os.ReadFile("../../.krew.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, p := range []string{"linux_amd64", "linux_arm64", "darwin_amd64", "darwin_arm64", "windows_amd64"} {
		write(t, dir, "kubectl-tao_"+p+".tar.gz", p)
	}
	got, err := RenderManifest(tmpl, "v9.9.9", SumsInDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"name: tao\n", "version: v9.9.9\n", "sha256: " + sum("windows_amd64"), "bin: kubectl-tao.exe\n",
		"releases/download/v9.9.9/kubectl-tao_darwin_arm64.tar.gz\n"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("rendered manifest lacks %q:\n%s", want, got)
		}
	}
}

// A published sha256sums.txt gives the sums of the committed manifest; a file that is not one,
// or lacks an archive, is an error rather than a manifest krew would refuse later.
func TestSumsFromFile(t *testing.T) {
	dir := t.TempDir()
	good := write(t, dir, "sha256sums.txt", sum("a")+"  kubectl-tao_linux_amd64.tar.gz\n"+sum("b")+"  kubectl-tao_darwin_arm64.tar.gz\n")
	s, err := SumsFromFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s("kubectl-tao_darwin_arm64.tar.gz"); err != nil || got != sum("b") {
		t.Errorf("darwin_arm64: got %q, %v; want %q", got, err, sum("b"))
	}
	if _, err := s("kubectl-tao_windows_amd64.tar.gz"); err == nil || !strings.Contains(err.Error(), "lists no kubectl-tao_windows_amd64.tar.gz") {
		t.Errorf("an archive not listed: err %v", err)
	}
	for _, bad := range []string{"abc  x.tar.gz\n", sum("a") + " x.tar.gz\n", strings.ToUpper(sum("a")) + "  x.tar.gz\n", sum("a") + "  \n"} {
		if _, err := SumsFromFile(write(t, dir, "bad.txt", bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if _, err := SumsFromFile(filepath.Join(dir, "missing.txt")); err == nil {
		t.Error("a missing file: no error")
	}
}

func TestPlaceholderManifest(t *testing.T) {
	tmpl, err := os.ReadFile("../../.krew.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := RenderManifest(tmpl, "v0.1.0", PlaceholderSums)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(got), "sha256: \""+Placeholder+"\"\n"); n != 5 {
		t.Errorf("%d placeholder sums, want one per platform (5):\n%s", n, got)
	}
}
