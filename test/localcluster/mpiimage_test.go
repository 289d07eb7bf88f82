package localcluster

import (
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/kubectl-tao/kubectl-tao/hack/release"
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
	links := checkImageEntries(t, openMPIImageEntries, false,
		"usr/bin/orterun", "usr/bin/orted", "usr/bin/python3", "usr/share/openmpi/help-mpi-runtime.txt", "etc/openmpi/openmpi-mca-params.conf", "etc/passwd",
		"usr/lib/*-linux-gnu/openmpi/lib/openmpi3/mca_plm_rsh.so", "usr/lib/*-linux-gnu/libmpi.so.*", "usr/lib/python3/dist-packages/mpi4py/MPI.*.so", "usr/lib/python3.*/socket.py")
	if links["usr/bin/mpirun"] != "mpirun.openmpi" || links["usr/bin/mpirun.openmpi"] != "orterun" {
		t.Errorf("mpirun -> %q -> %q, want mpirun.openmpi -> orterun", links["usr/bin/mpirun"], links["usr/bin/mpirun.openmpi"])
	}
}

func TestMPICHUnavailable(t *testing.T) {
	root := t.TempDir()
	if why := MPICHUnavailable(root); !strings.Contains(why, "mpich is not installed") || !strings.Contains(why, "apt-get install --no-install-recommends mpich") {
		t.Errorf("nothing installed: %q, want the package and how to install it", why)
	}
	touchUnder(t, root, hostPython)
	for _, p := range mpichPrograms {
		touchUnder(t, root, p)
	}
	if why := MPICHUnavailable(root); !strings.Contains(why, "nothing at "+mpichLib) {
		t.Errorf("hydra without MPICH's library: %q, want the library named", why)
	}
	touchUnder(t, root, "/usr/lib/x86_64-linux-gnu/libmpich.so.12")
	if why := MPICHUnavailable(root); why != "" {
		t.Errorf("everything present: %q, want none", why)
	}
}

// TestMPICHImageEntries: where mpich is installed, the image has hydra's mpiexec and proxy,
// MPICH's library with its own libraries, python3 with ctypes, and mpirun naming MPICH's.
func TestMPICHImageEntries(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image copies Linux host files found with ldd")
	}
	if why := MPICHUnavailable("/"); why != "" {
		t.Skip(why)
	}
	links := checkImageEntries(t, mpichImageEntries, false,
		"usr/bin/mpiexec.hydra", "usr/bin/hydra_pmi_proxy", "usr/lib/*-linux-gnu/libmpich.so.12.*", "usr/lib/*-linux-gnu/libucp.so.0*", "usr/lib/python3.*/ctypes/__init__.py", "usr/bin/python3.*")
	if links["usr/bin/mpirun"] != "mpirun.mpich" || links["usr/bin/mpirun.mpich"] != "mpiexec.hydra" {
		t.Errorf("mpirun -> %q -> %q, want mpirun.mpich -> mpiexec.hydra", links["usr/bin/mpirun"], links["usr/bin/mpirun.mpich"])
	}
}

// checkImageEntries collects an image's entries and checks that each pattern (filepath.Match's)
// matches one of them and, unless ssh, that none is ssh or sshd: the agent's MPI images need no
// remote shell of their own. It returns the image's symlinks, by path.
func checkImageEntries(t *testing.T, collect func() ([]release.LayerEntry, error), ssh bool, patterns ...string) map[string]string {
	t.Helper()
	entries, err := collect()
	if err != nil {
		t.Fatal(err)
	}
	links := map[string]string{}
	for _, e := range entries {
		if e.Link != "" {
			links[e.Path] = e.Link
		}
		if base := filepath.Base(e.Path); !ssh && !e.Dir && (base == "ssh" || base == "sshd") {
			t.Errorf("%s in an image that needs no ssh", e.Path)
		}
	}
	for _, pattern := range patterns {
		if !slices.ContainsFunc(entries, func(e release.LayerEntry) bool { ok, _ := filepath.Match(pattern, e.Path); return ok }) {
			t.Errorf("nothing in the image matches %s", pattern)
		}
	}
	return links
}

func TestOpenMPISSHUnavailable(t *testing.T) {
	root := t.TempDir()
	if why := OpenMPISSHUnavailable(root); !strings.Contains(why, "openmpi-bin python3-mpi4py is not installed") {
		t.Errorf("nothing installed: %q, want OpenMPI's packages first", why)
	}
	touchUnder(t, root, hostPython)
	for _, p := range append(openMPIPrograms, filepath.Join(distPackages, "mpi4py", "__init__.py"), "/usr/lib/x86_64-linux-gnu/openmpi/lib/x") {
		touchUnder(t, root, p)
	}
	if why := OpenMPISSHUnavailable(root); !strings.Contains(why, "openssh-client openssh-server is not installed on this host (no /usr/bin/ssh)") ||
		!strings.Contains(why, "apt-get install --no-install-recommends openssh-client openssh-server") {
		t.Errorf("OpenMPI without ssh: %q, want the ssh packages and how to install them", why)
	}
	for _, p := range append(sshPrograms, sshConfigs...) {
		touchUnder(t, root, p)
	}
	if why := OpenMPISSHUnavailable(root); why != "" {
		t.Errorf("everything present: %q, want none", why)
	}
}

// TestOpenMPISSHImageEntries: the OpenMPI image plus ssh, sshd, their settings as Debian ships
// them and sshd's privilege separation user; no host key of this machine's.
func TestOpenMPISSHImageEntries(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image copies Linux host files found with ldd")
	}
	if why := OpenMPISSHUnavailable("/"); why != "" {
		t.Skip(why)
	}
	checkImageEntries(t, openMPISSHImageEntries, true, "usr/bin/orted", "usr/bin/ssh", "usr/sbin/sshd", "etc/ssh/sshd_config", "etc/ssh/ssh_config",
		"usr/lib/*-linux-gnu/libcrypto.so.*", "usr/lib/python3/dist-packages/mpi4py/MPI.*.so")
	entries, err := openMPISSHImageEntries()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Path, "ssh_host_") {
			t.Errorf("the image has %s: a host's key has no place in an image", e.Path)
		}
		if e.Path == "etc/passwd" && !strings.Contains(string(e.Data), "\nsshd:") {
			t.Errorf("/etc/passwd has no sshd user:\n%s", e.Data)
		}
	}
}
