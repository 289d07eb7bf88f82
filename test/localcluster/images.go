package localcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/kubectl-tao/kubectl-tao/hack/release"
)

// Images for the real node, made without docker or a registry: host binaries with the
// libraries ldd lists, copied into one layer, entries sorted and owned by root with mtime 0, so
// one host gives the same bytes every time. The node imports them into containerd at up; pods
// name them with any pull policy but Always.

// Image roles (keys of RealNodeInfo.Images) and references.
const (
	ImageTest   = "test"
	ImageShOnly = "sh-only"
	ImagePause  = "pause"
	ImageStager = "stager"
	ImageDCGM   = "dcgm-exporter"

	TestImageRef   = "docker.io/local/tao-test:1"
	ShOnlyImageRef = "docker.io/local/sh-only:1"
	PauseImageRef  = "docker.io/local/pause:1"
	// DCGMImageRef is the dcgm-exporter stand-in (cmd/dcgmstandin) at /bin/dcgm-exporter.
	DCGMImageRef = "docker.io/local/dcgm-exporter:1"
	// StagerArchive is what `make stager-image` writes, relative to the repository root.
	StagerArchive = "bin/kubectl-tao-stager.oci.tar"
)

// testImageTools are the host programs of local/tao-test:1, at /bin/<name>. sh is dash.
var testImageTools = []string{
	"bash", "sh", "printf", "echo", "sleep", "head", "tail", "cat", "tr", "env", "id", "hostname",
	"mkdir", "rm", "ls", "getent", "grep", "wc", "date", "kill", "true", "false", "seq", "touch",
	"cp", "mv", "sed", "sort", "cut", "uniq", "stat", "df", "readlink", "test", "timeout", "ps",
}

// NodeImage is one built image archive, or why an image could not be built on this host.
type NodeImage struct {
	Ref     string
	Archive string
	// Unavailable, when set, says why the image was not built (Archive is empty): the torch
	// and MPI images need their Debian packages on the host.
	Unavailable string
}

// BuildNodeImages writes the node's images into outDir: the test image (with /bin/nvidia-smi,
// the stand-in of cmd/nvidiasmi, and /bin/trainer built from ./test/trainer when that package
// exists), the sh-only image, the pause image, the dcgm-exporter stand-in's image, the
// torch image where python3-torch is installed, the OpenMPI image where openmpi-bin and
// python3-mpi4py are and the MPICH image where mpich is (else an entry saying why not), and it
// adds the stager archive of `make stager-image` when present. Building needs the Go
// toolchain and the repository (sourceDir) for the Go programs.
func BuildNodeImages(ctx context.Context, sourceDir, outDir string, progress io.Writer) (map[string]NodeImage, error) {
	if sourceDir == "" {
		return nil, errors.New("the real node's images are built from the repository: run from inside it or pass --source-dir")
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	start := time.Now()
	// One go build for every Go program: the toolchain starts once and links them in parallel.
	pkgs := []string{"./test/localcluster/cmd/pause", "./test/localcluster/cmd/dcgmstandin", "./test/localcluster/cmd/nvidiasmi"}
	haveTrainer := false
	if _, err := os.Stat(filepath.Join(sourceDir, "test", "trainer")); err == nil {
		pkgs, haveTrainer = append(pkgs, "./test/trainer"), true
	}
	progs, err := goBuildStatic(ctx, sourceDir, outDir, pkgs...)
	if err != nil {
		return nil, err
	}
	base := baseEntries()
	testEntries := append([]release.LayerEntry(nil), base...)
	tools, err := hostToolEntries(testImageTools)
	if err != nil {
		return nil, err
	}
	testEntries = mergeEntries(testEntries, tools)
	testEntries = mergeEntries(testEntries, []release.LayerEntry{{Path: "bin/nvidia-smi", Mode: 0o755, Data: progs["nvidiasmi"]}})
	if haveTrainer {
		testEntries = mergeEntries(testEntries, []release.LayerEntry{{Path: "bin/trainer", Mode: 0o755, Data: progs["trainer"]}})
	}
	sh, err := hostToolEntries([]string{"sh"})
	if err != nil {
		return nil, err
	}
	pauseData := progs["pause"]
	specs := []imageSpec{
		{ImageTest, TestImageRef, testEntries, nil, []string{"/bin/bash"}, 0},
		{ImageShOnly, ShOnlyImageRef, mergeEntries(minimalEntries(), sh), nil, []string{"/bin/sh"}, 0},
		{ImagePause, PauseImageRef, []release.LayerEntry{{Path: "pause", Mode: 0o755, Data: pauseData}}, []string{"/pause"}, nil, 0},
		{ImageDCGM, DCGMImageRef, append(minimalEntries(), release.LayerEntry{Path: "bin/dcgm-exporter", Mode: 0o755, Data: progs["dcgmstandin"]}), []string{"/bin/dcgm-exporter"}, nil, 0},
	}
	out := map[string]NodeImage{}
	// The images of the host's Debian packages, each only where its packages are installed.
	for _, h := range []struct {
		role, ref   string
		unavailable func(root string) string
		entries     func() ([]release.LayerEntry, error)
	}{
		{ImageTorch, TorchImageRef, TorchUnavailable, torchImageEntries},
		{ImageOpenMPI, OpenMPIImageRef, OpenMPIUnavailable, openMPIImageEntries},
		{ImageMPICH, MPICHImageRef, MPICHUnavailable, mpichImageEntries},
		{ImageOpenMPISSH, OpenMPISSHImageRef, OpenMPISSHUnavailable, openMPISSHImageEntries},
	} {
		if why := h.unavailable("/"); why != "" {
			fmt.Fprintf(progress, "localcluster: no %s image: %s\n", shortRef(h.ref), why)
			out[h.role] = NodeImage{Ref: h.ref, Unavailable: why}
			continue
		}
		collect := time.Now()
		entries, err := h.entries()
		if err != nil {
			return nil, err
		}
		specs = append(specs, imageSpec{h.role, h.ref, entries, nil, []string{"/bin/bash"}, time.Since(collect)})
	}
	for _, s := range specs {
		written := time.Now()
		path := filepath.Join(outDir, s.role+".oci.tar")
		if err := writeImage(path, s.entries, release.RootfsImageOptions{
			Ref: s.ref, OS: "linux", Arch: runtime.GOARCH, Env: []string{"PATH=/bin:/usr/bin"},
			Entrypoint: s.entry, Cmd: s.cmd, Created: time.Unix(0, 0), CreatedBy: "localcluster images",
		}); err != nil {
			return nil, err
		}
		out[s.role] = NodeImage{Ref: s.ref, Archive: path}
		if s.collect > 0 {
			fmt.Fprintf(progress, "localcluster: built %s (%d files) in %s\n", shortRef(s.ref), len(s.entries), (s.collect + time.Since(written)).Round(10*time.Millisecond))
		}
	}
	stager := filepath.Join(sourceDir, StagerArchive)
	if f, err := os.Open(stager); err == nil {
		name, err := release.ImageName(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", stager, err)
		}
		out[ImageStager] = NodeImage{Ref: name, Archive: stager}
	}
	fmt.Fprintf(progress, "localcluster: built the node's images in %s\n", time.Since(start).Round(10*time.Millisecond))
	return out, nil
}

// imageSpec is one image BuildNodeImages writes: its files, entrypoint and command.
type imageSpec struct {
	role, ref  string
	entries    []release.LayerEntry
	entry, cmd []string
	// collect is how long finding a host image's files took, for its build time; 0 for the others.
	collect time.Duration
}

// writeImage writes an image archive straight to its file (the torch image is hundreds of MB).
func writeImage(path string, entries []release.LayerEntry, opts release.RootfsImageOptions) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if err := release.OCIRootfsImage(w, entries, opts); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// goBuildStatic builds static binaries of packages of the repository into outDir and returns
// their contents by program name (the package's last path element).
func goBuildStatic(ctx context.Context, sourceDir, outDir string, pkgs ...string) (map[string][]byte, error) {
	binDir := filepath.Join(outDir, "programs")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, err
	}
	args := append([]string{"build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", binDir + string(filepath.Separator)}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = sourceDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if data, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build %s for the node's images: %w: %s", strings.Join(pkgs, " "), err, strings.TrimSpace(string(data)))
	}
	out := map[string][]byte{}
	for _, pkg := range pkgs {
		name := filepath.Base(pkg)
		data, err := os.ReadFile(filepath.Join(binDir, name))
		if err != nil {
			return nil, err
		}
		out[name] = data
	}
	return out, nil
}

// minimalEntries are the directories every image has.
func minimalEntries() []release.LayerEntry {
	return []release.LayerEntry{
		{Path: "bin", Dir: true, Mode: 0o755},
		{Path: "tmp", Dir: true, Mode: 0o1777},
	}
}

// baseEntries are the directories and /etc files of the test image.
func baseEntries() []release.LayerEntry {
	return append(minimalEntries(),
		release.LayerEntry{Path: "etc", Dir: true, Mode: 0o755},
		release.LayerEntry{Path: "root", Dir: true, Mode: 0o700},
		release.LayerEntry{Path: "etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		release.LayerEntry{Path: "etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnogroup:x:65534:\n")},
		release.LayerEntry{Path: "etc/nsswitch.conf", Mode: 0o644, Data: []byte("passwd: files\ngroup: files\nhosts: files dns\n")},
	)
}

// hostToolEntries copies host programs to /bin/<name> with the libraries ldd lists at the
// paths the loader looks them up by.
func hostToolEntries(names []string) ([]release.LayerEntry, error) {
	var out []release.LayerEntry
	seen := map[string]bool{}
	add := func(dst, src string, mode int64) error {
		if seen[dst] {
			return nil
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("copy %s into an image: %w", src, err)
		}
		seen[dst] = true
		out = append(out, release.LayerEntry{Path: dst, Mode: mode, Data: data})
		return nil
	}
	for _, name := range names {
		src, err := exec.LookPath(name)
		if err != nil {
			return nil, fmt.Errorf("the node's images need %s on this host: %w", name, err)
		}
		if err := add("bin/"+name, src, 0o755); err != nil {
			return nil, err
		}
		libs, err := lddPaths(src)
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			if err := add(strings.TrimPrefix(lib, "/"), lib, 0o755); err != nil {
				return nil, err
			}
		}
	}
	// Parent directories of the libraries.
	dirs := map[string]bool{}
	for _, e := range out {
		for d := filepath.Dir(e.Path); d != "." && d != "bin"; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	for d := range dirs {
		out = append(out, release.LayerEntry{Path: d, Dir: true, Mode: 0o755})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// lddPaths returns the absolute library paths ldd prints for a binary; none for a static one.
func lddPaths(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not a dynamic executable") {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w: %s", bin, err, strings.TrimSpace(string(out)))
	}
	return ParseLdd(string(out)), nil
}

// ParseLdd extracts the library paths from ldd output ("libc.so.6 => /lib/.../libc.so.6
// (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)"); the vDSO has no file.
func ParseLdd(out string) []string {
	var paths []string
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if i := strings.Index(line, "=>"); i >= 0 {
			line = strings.TrimSpace(line[i+2:])
		}
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "/") {
			paths = append(paths, f[0])
		}
	}
	return paths
}

// mergeEntries appends b's entries whose paths a does not have.
func mergeEntries(a, b []release.LayerEntry) []release.LayerEntry {
	have := map[string]bool{}
	for _, e := range a {
		have[strings.TrimSuffix(e.Path, "/")] = true
	}
	for _, e := range b {
		if !have[strings.TrimSuffix(e.Path, "/")] {
			a = append(a, e)
			have[strings.TrimSuffix(e.Path, "/")] = true
		}
	}
	return a
}
