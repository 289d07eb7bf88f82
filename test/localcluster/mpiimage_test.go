package localcluster

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestOpenMPIUnavailable(t *testing.T) {
	root := t.TempDir()
	why := OpenMPIUnavailable(root)
	if !strings.Contains(why, "openmpi-bin python3-mpi4py is not installed") || !strings.Contains(why, "apt-get install") || !strings.Contains(why, hostPython) {
		t.Errorf("nothing installed: %q, want the packages, the first missing path and how to install them", why)
	}
	touchUnder(t, root, hostPython)
	for _, p := range openMPIPrograms[:3] {
		touchUnder(t, root, p)
	}
	if why := OpenMPIUnavailable(root); !strings.Contains(why, "/usr/bin/orted") {
		t.Errorf("mpirun without orted: %q, want the missing daemon named", why)
	}
	for _, p := range openMPIPrograms {
		touchUnder(t, root, p)
	}
	if why := OpenMPIUnavailable(root); !strings.Contains(why, "dist-packages/mpi4py/__init__.py") {
		t.Errorf("OpenMPI without mpi4py: %q, want the missing package named", why)
	}
	touchUnder(t, root, filepath.Join(distPackages, "mpi4py", "__init__.py"))
	if why := OpenMPIUnavailable(root); !strings.Contains(why, "nothing at /usr/lib/*-linux-gnu/openmpi") {
		t.Errorf("no MCA components: %q, want their directory named", why)
	}
	touchUnder(t, root, "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_plm_rsh.so")
	if why := OpenMPIUnavailable(root); why != "" {
		t.Errorf("everything present: %q, want none", why)
	}
}

// TestOpenMPIImageEntries: where the packages are installed, the image has OpenMPI's launcher
// and daemon with their libraries, its components and help texts, mpi4py, and mpirun naming
// OpenMPI's whatever the host's alternatives say; and no sshd.
func TestOpenMPIImageEntries(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image copies Linux host files found with ldd")
	}
	if why := OpenMPIUnavailable("/"); why != "" {
		t.Skip(why)
	}
	entries, err := openMPIImageEntries()
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]bool{}
	links := map[string]string{}
	for _, e := range entries {
		byPath[e.Path] = true
		if e.Link != "" {
			links[e.Path] = e.Link
		}
	}
	for _, p := range []string{"usr/bin/orterun", "usr/bin/orted", "usr/bin/python3", "usr/share/openmpi/help-mpi-runtime.txt", "etc/openmpi/openmpi-mca-params.conf", "etc/passwd"} {
		if !byPath[p] {
			t.Errorf("no %s in the image", p)
		}
	}
	for _, pattern := range []string{"usr/lib/*-linux-gnu/openmpi/lib/openmpi3/mca_plm_rsh.so", "usr/lib/*-linux-gnu/libmpi.so.*", "usr/lib/python3/dist-packages/mpi4py/MPI.*.so", "usr/lib/python3.*/socket.py"} {
		found := false
		for p := range byPath {
			if ok, _ := filepath.Match(pattern, p); ok {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("nothing in the image matches %s", pattern)
		}
	}
	if links["usr/bin/mpirun"] != "mpirun.openmpi" || links["usr/bin/mpirun.openmpi"] != "orterun" {
		t.Errorf("mpirun -> %q -> %q, want mpirun.openmpi -> orterun", links["usr/bin/mpirun"], links["usr/bin/mpirun.openmpi"])
	}
	for p := range byPath {
		if strings.HasSuffix(p, "/sshd") || strings.HasSuffix(p, "/ssh") {
			t.Errorf("%s in an image that needs no ssh", p)
		}
	}
}
