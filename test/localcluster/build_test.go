package localcluster

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeCache fills a cache dir with tiny executables standing in for every binary.
func fakeCache(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range Binaries(DefaultKubeVersion()) {
		p := b.Path(dir)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho "+b.Version+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestEnsureBinariesUsesCacheWithoutBuilding(t *testing.T) {
	cache := fakeCache(t)
	var progress bytes.Buffer
	// No source dir: any attempt to build would fail, so success proves nothing was rebuilt.
	paths, err := EnsureBinaries(context.Background(), DefaultKubeVersion(), cache, "", &progress)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range Binaries(DefaultKubeVersion()) {
		if paths[b.Name] != b.Path(cache) {
			t.Errorf("%s at %s, want %s", b.Name, paths[b.Name], b.Path(cache))
		}
		if _, ok := readStamp(b.Path(cache)); !ok {
			t.Errorf("%s: no stamp written after a successful --version", b.Name)
		}
	}
	if progress.Len() != 0 {
		t.Errorf("progress output for a warm cache: %q", progress.String())
	}
}

func TestEnsureBinariesRejectsHalfBuiltCache(t *testing.T) {
	cache := fakeCache(t)
	api := Binaries(DefaultKubeVersion())[2]
	if api.Name != CompAPIServer {
		t.Fatalf("unexpected order %v", api.Name)
	}
	// An interrupted build leaves only the temporary file; a truncated binary fails --version.
	if err := os.Rename(api.Path(cache), api.Path(cache)+".tmp123"); err != nil {
		t.Fatal(err)
	}
	etcd := Binaries(DefaultKubeVersion())[0].Path(cache)
	if err := os.WriteFile(etcd, []byte("#!/bin/sh\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := EnsureBinaries(context.Background(), DefaultKubeVersion(), cache, "", &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "2 cluster binaries missing") {
		t.Fatalf("err = %v; want both the half-built and the broken binary reported", err)
	}
}

func TestBinaryUsableStamp(t *testing.T) {
	cache := fakeCache(t)
	p := Binaries(DefaultKubeVersion())[0].Path(cache)
	if ok, why := binaryUsable(context.Background(), p); !ok {
		t.Fatal(why)
	}
	// A binary replaced after it was stamped must be checked again.
	if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 1\n#longer than before\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if ok, _ := binaryUsable(context.Background(), p); ok {
		t.Error("a changed binary was trusted by its old stamp")
	}
	if ok, why := binaryUsable(context.Background(), filepath.Join(cache, "nope")); ok || why != "missing" {
		t.Errorf("missing binary: %v %q", ok, why)
	}
}

func TestBinariesLayout(t *testing.T) {
	seen := map[string]bool{}
	for _, b := range Binaries(DefaultKubeVersion()) {
		if seen[b.Name] {
			t.Errorf("duplicate %s", b.Name)
		}
		seen[b.Name] = true
		if !strings.HasSuffix(b.CacheKey, "-"+b.Version) {
			t.Errorf("%s: cache key %s is not <component>-<version>", b.Name, b.CacheKey)
		}
		if !strings.Contains(b.LDFlags, "-s -w") {
			t.Errorf("%s: ldflags %q lack -s -w", b.Name, b.LDFlags)
		}
	}
	api := Binaries(DefaultKubeVersion())[2]
	for _, want := range []string{"k8s.io/component-base/version.gitVersion=" + DefaultKubernetesVersion, "k8s.io/client-go/pkg/version.gitMinor=37"} {
		if !strings.Contains(api.LDFlags, want) {
			t.Errorf("apiserver ldflags lack %s", want)
		}
	}
}

func TestFindSourceDir(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := FindSourceDir(wd)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "test", "localcluster", "build", "etcd", "go.mod")); err != nil {
		t.Errorf("root %s lacks the wrapper modules", root)
	}
	if _, err := FindSourceDir(t.TempDir()); err == nil {
		t.Error("found a source dir under a temp dir")
	}
}

// kubectl comes from the control plane's wrapper module with its settings (one build cache,
// the same version), into a cache directory of its own (only kubectl goes on PATH), and the
// module pins its package (builds run with -mod=readonly).
func TestKubectlBinary(t *testing.T) {
	k, api := KubectlBinary(DefaultKubeVersion()), Binaries(DefaultKubeVersion())[2]
	if k.Module != api.Module || k.LDFlags != api.LDFlags || k.CGO != api.CGO || k.Version != api.Version {
		t.Errorf("kubectl %+v is not built like %s %+v", k, api.Name, api)
	}
	if filepath.Dir(k.Path("/cache")) == filepath.Dir(api.Path("/cache")) {
		t.Errorf("kubectl shares %s's cache directory %s", api.Name, filepath.Dir(api.Path("/cache")))
	}
	if !strings.Contains(KubeWrapperTools, `"`+k.Package+`"`) {
		t.Errorf("the wrappers' tools.go does not import %s", k.Package)
	}
}
