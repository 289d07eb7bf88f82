package localcluster

import (
	"debug/elf"
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

// Images made of this host's Debian packages (local/torch:1, local/openmpi:1): unlike the
// other images they mirror the host's layout, every file at its real path and every symlink on
// the way to it as a symlink (/lib64 -> usr/lib64, libfoo.so.1 -> libfoo.so.1.2, the python3 ->
// python3.11 of /usr/bin, torch/lib/*.so -> /usr/lib/x86_64-linux-gnu), because the ELF
// interpreter, sonames, the packages' own library links and compiled-in paths (OpenMPI's
// component and help directories) are looked up by those paths. Files keep their host mtimes:
// Python's cached bytecode is valid only while its sources keep theirs.

const (
	// hostPython is Debian's interpreter, by path: a python3 found on PATH (pyenv, a venv) has
	// no Debian packages.
	hostPython = "/usr/bin/python3"
	// distPackages is where Debian's python3-* packages live.
	distPackages = "/usr/lib/python3/dist-packages"
)

// hostImage is an image of host files: programs, and trees copied whole, with every library ldd
// lists for the programs and for the shared objects of the trees.
type hostImage struct {
	// programs are ELF files, or symlinks to them.
	programs []string
	// trees are directories (or files) copied whole.
	trees []string
	// skip leaves out the entries of a tree it names, by the tree and the path below it.
	skip func(tree, rel string) bool
	// extra are the image's own entries (scripts, links); the host's win where both have a path.
	extra []release.LayerEntry
}

// withPython adds Debian's python3, its stdlib (without what only embedding and pip need) and
// the given entries of dist-packages, each .py module with its __pycache__ entries.
func (h hostImage) withPython(packages ...string) (hostImage, error) {
	python, err := filepath.EvalSymlinks(hostPython)
	if err != nil {
		return h, err
	}
	stdlib := filepath.Join("/usr/lib", filepath.Base(python)) // /usr/lib/python3.11
	h.programs = append(h.programs, hostPython)
	h.trees = append(h.trees, stdlib)
	for _, p := range packages {
		h.trees = append(h.trees, filepath.Join(distPackages, p))
		if mod, ok := strings.CutSuffix(p, ".py"); ok {
			pycs, err := filepath.Glob(filepath.Join(distPackages, "__pycache__", mod+".*.pyc"))
			if err != nil {
				return h, err
			}
			h.trees = append(h.trees, pycs...)
		}
	}
	skip := h.skip
	h.skip = func(tree, rel string) bool {
		if tree == stdlib && stdlibSkip(rel) {
			return true
		}
		return skip != nil && skip(tree, rel)
	}
	return h, nil
}

// stdlibSkip reports the entries of the stdlib dir no program needs at run time: the static
// libpython and Makefile for embedding (config-3.11-x86_64-linux-gnu, 25 MB), and the host's
// pip-installed packages (not on Debian's sys.path).
func stdlibSkip(rel string) bool {
	return strings.HasPrefix(rel, "config-") || rel == "dist-packages" || rel == "site-packages"
}

// entries collects the image's files from this host, with the test image's /etc files, /tmp
// and /root.
func (h hostImage) entries() ([]release.LayerEntry, error) {
	t := &hostTree{entries: map[string]release.LayerEntry{}}
	elfs := append([]string(nil), h.programs...)
	for _, p := range h.programs {
		if err := t.add(p); err != nil {
			return nil, err
		}
	}
	for _, d := range h.trees {
		found, err := t.addTree(d, func(rel string) bool { return h.skip != nil && h.skip(d, rel) })
		if err != nil {
			return nil, err
		}
		elfs = append(elfs, found...)
	}
	// ldd costs tens of milliseconds a file and the trees hold hundreds of shared objects, most
	// of which need only libraries an earlier ldd already listed with their own closure: those
	// are skipped by their DT_NEEDED names.
	closed := map[string]bool{}
	for _, f := range elfs {
		if needed, err := neededLibs(f); err == nil && allIn(needed, closed) {
			continue
		}
		libs, err := lddPaths(f)
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			if err := t.add(lib); err != nil {
				return nil, err
			}
			closed[filepath.Base(lib)] = true
		}
	}
	out := make([]release.LayerEntry, 0, len(t.entries)+len(h.extra))
	for _, e := range t.entries {
		out = append(out, e)
	}
	out = mergeEntries(out, h.extra)
	// /etc/passwd and friends, /tmp, /root; the host's /bin symlink wins over the base's dir.
	out = mergeEntries(out, baseEntries())
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// neededLibs are an ELF file's DT_NEEDED names.
func neededLibs(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ImportedLibraries()
}

func allIn(names []string, set map[string]bool) bool {
	for _, n := range names {
		if !set[n] {
			return false
		}
	}
	return true
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
		return fmt.Errorf("copy %s into an image: too many levels of symlinks", p)
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
			return fmt.Errorf("copy %s into an image: %w", p, err)
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
			return fmt.Errorf("copy %s into an image: %s is neither a directory, a regular file nor a symlink", p, next)
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
