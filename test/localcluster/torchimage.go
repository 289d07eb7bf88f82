package localcluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/kubectl-tao/kubectl-tao/hack/release"
)

// The torch image, local/torch:1: Debian's python3-torch (CPU) and everything it needs at run
// time, copied from the host like the other images, so the real node runs real torchrun without
// a registry. It exists only where python3-torch is installed (`.ci/run`
// installs it); elsewhere the launcher says why and the torch test skips, or fails under CI.
//
// Unlike the other images it mirrors the host's layout: every file at its real path and every
// symlink on the way to it as a symlink (/lib64 -> usr/lib64, libfoo.so.1 -> libfoo.so.1.2, the
// python3 -> python3.11 of /usr/bin, torch/lib/*.so -> /usr/lib/x86_64-linux-gnu), because the
// ELF interpreter, sonames and torch's own library links are looked up by those paths. Files
// keep their host mtimes: Python's cached bytecode is valid only while its sources keep theirs,
// and torch has thousands of modules to recompile at every start otherwise.

// Image role and reference.
const (
	ImageTorch    = "torch"
	TorchImageRef = "docker.io/local/torch:1"
)

const (
	// torchPython is Debian's interpreter, by path: a python3 found on PATH (pyenv, a venv) has no
	// Debian packages.
	torchPython = "/usr/bin/python3"
	// torchDistPackages is where Debian's python3-* packages live.
	torchDistPackages = "/usr/lib/python3/dist-packages"
)

// torchPackages are the entries of dist-packages that `import torch`, torchrun and a gloo
// process group import (measured with sys.modules): torch and its runtime Python dependencies.
// Each .py module brings its __pycache__ entries.
var torchPackages = []string{"torch", "numpy", "typing_extensions.py", "six.py", "astunparse"}

// torchStdlibSkip reports the entries of the stdlib dir no program needs at run time: the
// static libpython and Makefile for embedding (config-3.11-x86_64-linux-gnu, 25 MB), and the
// host's pip-installed packages (not on Debian's sys.path).
func torchStdlibSkip(rel string) bool {
	return strings.HasPrefix(rel, "config-") || rel == "dist-packages" || rel == "site-packages"
}

// torchrunScript is the image's torchrun. Debian's /usr/bin/torchrun finds its entry point
// through the package metadata (torch-*.egg-info), which the image leaves out; this calls the
// same function.
const torchrunScript = `#!/usr/bin/python3
# torchrun: torch.distributed.run, what Debian's /usr/bin/torchrun calls through its entry point.
import sys
from torch.distributed.run import main
sys.exit(main())
`

// TorchUnavailable says why the torch image cannot be built on the host whose root is root
// ("/" outside tests), or "" when it can.
func TorchUnavailable(root string) string {
	for _, p := range []string{torchPython, filepath.Join(torchDistPackages, "torch", "__init__.py")} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			return fmt.Sprintf("python3-torch is not installed on this host (no %s): `apt-get install --no-install-recommends python3-torch` (as .ci/run does)", p)
		}
	}
	return ""
}

// torchImageEntries collects the torch image's files from this host.
func torchImageEntries() ([]release.LayerEntry, error) {
	t := &hostTree{entries: map[string]release.LayerEntry{}}
	python, err := filepath.EvalSymlinks(torchPython)
	if err != nil {
		return nil, err
	}
	stdlib := filepath.Join("/usr/lib", filepath.Base(python)) // /usr/lib/python3.11
	// The ELF files whose libraries the image needs: the interpreter, the shells, and below
	// every extension module and library of the packages.
	elfs := []string{torchPython, "/bin/sh", "/bin/bash"}
	for _, p := range elfs {
		if err := t.add(p); err != nil {
			return nil, err
		}
	}
	dirs := []string{stdlib}
	for _, p := range torchPackages {
		dirs = append(dirs, filepath.Join(torchDistPackages, p))
		if mod, ok := strings.CutSuffix(p, ".py"); ok {
			pycs, err := filepath.Glob(filepath.Join(torchDistPackages, "__pycache__", mod+".*.pyc"))
			if err != nil {
				return nil, err
			}
			dirs = append(dirs, pycs...)
		}
	}
	for _, d := range dirs {
		found, err := t.addTree(d, func(rel string) bool { return d == stdlib && torchStdlibSkip(rel) })
		if err != nil {
			return nil, err
		}
		elfs = append(elfs, found...)
	}
	for _, elf := range elfs {
		libs, err := lddPaths(elf)
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			if err := t.add(lib); err != nil {
				return nil, err
			}
		}
	}
	out := make([]release.LayerEntry, 0, len(t.entries)+1)
	for _, e := range t.entries {
		out = append(out, e)
	}
	out = mergeEntries(out, []release.LayerEntry{{Path: "usr/bin/torchrun", Mode: 0o755, Data: []byte(torchrunScript)}})
	// /etc/passwd and friends, /tmp, /root; the host's /bin symlink wins over the base's dir.
	out = mergeEntries(out, baseEntries())
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// sharedObject matches extension modules and libraries: x.so, x.so.1.13.
var sharedObject = regexp.MustCompile(`\.so(\.[0-9.]+)?$`)

// hostTree is a set of host paths copied as the host has them.
type hostTree struct {
	entries map[string]release.LayerEntry // by path in the image
}

// add makes the absolute host path p resolve in the image as on the host: each directory on
// the way, each symlink as a symlink (and what it points to), and the file it ends at. A
// symlink pointing at nothing is kept as it is.
func (t *hostTree) add(p string) error {
	return t.addDepth(p, 0)
}

func (t *hostTree) addDepth(p string, depth int) error {
	if depth > 40 {
		return fmt.Errorf("copy %s into the torch image: too many levels of symlinks", p)
	}
	parts := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	cur := "/"
	for i, part := range parts {
		next := filepath.Join(cur, part)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) && depth > 0 {
			return nil // the end of a dangling symlink
		}
		if err != nil {
			return fmt.Errorf("copy %s into the torch image: %w", p, err)
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(next)
			if err != nil {
				return err
			}
			t.put(next, release.LayerEntry{Link: target})
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			return t.addDepth(filepath.Join(append([]string{target}, parts[i+1:]...)...), depth+1)
		case fi.IsDir():
			t.put(next, release.LayerEntry{Dir: true, Mode: int64(fi.Mode().Perm() | fi.Mode()&fs.ModeSticky)})
			cur = next
		case fi.Mode().IsRegular() && i == len(parts)-1:
			t.put(next, release.LayerEntry{Mode: int64(fi.Mode().Perm()), Src: next, ModTime: fi.ModTime()})
		default:
			return fmt.Errorf("copy %s into the torch image: %s is neither a directory, a regular file nor a symlink", p, next)
		}
	}
	return nil
}

// put records one entry at its image path (the host path without the leading slash).
func (t *hostTree) put(hostPath string, e release.LayerEntry) {
	e.Path = strings.TrimPrefix(hostPath, "/")
	if _, ok := t.entries[e.Path]; !ok {
		t.entries[e.Path] = e
	}
}

// addTree adds the file or directory tree root (skipping the entries skip names by their path
// relative to root) and returns the shared objects in it, by their host paths.
func (t *hostTree) addTree(root string, skip func(rel string) bool) ([]string, error) {
	if err := t.add(root); err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, err
	}
	var sos []string
	err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(real, p)
		if skip(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if err := t.add(p); err != nil {
			return err
		}
		if sharedObject.MatchString(d.Name()) {
			// A symlinked library (torch/lib/libtorch.so) counts where its target exists.
			if _, err := os.Stat(p); err == nil {
				sos = append(sos, p)
			}
		}
		return nil
	})
	return sos, err
}
