package localcluster

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kubectl-tao/kubectl-tao/hack/release"
)

// The MPI images, local/openmpi:1 (Debian's openmpi-bin and python3-mpi4py) and local/mpich:1
// (Debian's mpich), copied from the host as they lie (hostImage), so the real node runs real
// mpirun, its daemons and MPI processes for `submit --launcher mpi` without a registry. They
// have no sshd: the job's agent is mpirun's remote shell. Each exists only where its packages
// are installed (`.ci/run` installs them); elsewhere the launcher says why and the MPI test
// skips, or fails under CI.

// Image roles and references.
const (
	ImageOpenMPI    = "openmpi"
	OpenMPIImageRef = "docker.io/local/openmpi:1"
	ImageMPICH      = "mpich"
	MPICHImageRef   = "docker.io/local/mpich:1"
)

// openMPIPackages are what the image is made of, for the message that says how to install them.
const openMPIPackages = "openmpi-bin python3-mpi4py"

// openMPIPrograms are OpenMPI's launcher (mpirun.openmpi and mpiexec.openmpi are links to
// orterun), the daemon it starts on every other host, and the shells: the agent runs that
// daemon under /bin/sh, and the job's command runs under bash.
var openMPIPrograms = []string{
	"/usr/bin/orterun", "/usr/bin/mpirun.openmpi", "/usr/bin/mpiexec.openmpi", "/usr/bin/orted", "/bin/sh", "/bin/bash",
}

// openMPIDirs are found by pattern below the host's root: OpenMPI's MCA components (its
// plugins, dlopened from a compiled-in path) and PMIx's, the help texts every error message is
// read from, and Debian's MCA defaults (which leave out the InfiniBand and UCX transports a pod
// has no devices for).
var openMPIDirs = []string{
	"/usr/lib/*-linux-gnu/openmpi", "/usr/lib/*-linux-gnu/pmix2", "/usr/share/openmpi", "/etc/openmpi",
}

// OpenMPIUnavailable says why the OpenMPI image cannot be built on the host whose root is root
// ("/" outside tests), or "" when it can.
func OpenMPIUnavailable(root string) string {
	need := append(append([]string{hostPython}, openMPIPrograms...), filepath.Join(distPackages, "mpi4py", "__init__.py"))
	for _, p := range need {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			return fmt.Sprintf("%s is not installed on this host (no %s): `apt-get install --no-install-recommends %s` (as .ci/run does)", openMPIPackages, p, openMPIPackages)
		}
	}
	for _, pattern := range openMPIDirs[:1] {
		if m, _ := filepath.Glob(filepath.Join(root, pattern)); len(m) == 0 {
			return fmt.Sprintf("%s is not installed on this host (nothing at %s): `apt-get install --no-install-recommends %s` (as .ci/run does)", openMPIPackages, pattern, openMPIPackages)
		}
	}
	return ""
}

// openMPIImageEntries collects the OpenMPI image's files from this host. mpirun and mpiexec are
// the image's own links to OpenMPI's: the host's go through Debian's alternatives, which name
// MPICH's where that is installed too and preferred.
func openMPIImageEntries() ([]release.LayerEntry, error) {
	h := hostImage{
		programs: openMPIPrograms,
		extra: []release.LayerEntry{
			{Path: "usr/bin/mpirun", Link: "mpirun.openmpi"},
			{Path: "usr/bin/mpiexec", Link: "mpiexec.openmpi"},
		},
	}
	h, err := h.withTrees(openMPIDirs...).withPython("mpi4py")
	if err != nil {
		return nil, err
	}
	return h.entries()
}

// mpichPackages is what the MPICH image is made of.
const mpichPackages = "mpich"

// mpichPrograms are hydra's mpiexec (mpirun.mpich and mpiexec.mpich are links to it), the
// proxy it starts on every host, MPICH's library (which no program links: an MPI program
// does, here python3's ctypes, as Debian's mpi4py is built for OpenMPI only) and the shells.
var mpichPrograms = []string{
	"/usr/bin/mpiexec.hydra", "/usr/bin/mpirun.mpich", "/usr/bin/mpiexec.mpich", "/usr/bin/hydra_pmi_proxy", "/bin/sh", "/bin/bash",
}

// mpichLib is MPICH's library, by its soname, in the multiarch directory.
const mpichLib = "/usr/lib/*-linux-gnu/libmpich.so.12"

// mpichDirs are UCX's transport modules (MPICH's ch4 device in Debian is UCX's), dlopened from
// a compiled-in path.
var mpichDirs = []string{"/usr/lib/*-linux-gnu/ucx"}

// MPICHUnavailable says why the MPICH image cannot be built on the host whose root is root ("/"
// outside tests), or "" when it can.
func MPICHUnavailable(root string) string {
	for _, p := range append([]string{hostPython}, mpichPrograms...) {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			return fmt.Sprintf("%s is not installed on this host (no %s): `apt-get install --no-install-recommends %s` (as .ci/run does)", mpichPackages, p, mpichPackages)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(root, mpichLib)); len(m) == 0 {
		return fmt.Sprintf("%s is not installed on this host (nothing at %s): `apt-get install --no-install-recommends %s` (as .ci/run does)", mpichPackages, mpichLib, mpichPackages)
	}
	return ""
}

// mpichImageEntries collects the MPICH image's files from this host; mpirun and mpiexec are the
// image's own links to MPICH's, as in the OpenMPI image.
func mpichImageEntries() ([]release.LayerEntry, error) {
	libs, err := filepath.Glob(mpichLib)
	if err != nil {
		return nil, err
	}
	h := hostImage{
		programs: append(append([]string(nil), mpichPrograms...), libs...),
		extra: []release.LayerEntry{
			{Path: "usr/bin/mpirun", Link: "mpirun.mpich"},
			{Path: "usr/bin/mpiexec", Link: "mpiexec.mpich"},
		},
	}
	if h, err = h.withTrees(mpichDirs...).withPython(); err != nil {
		return nil, err
	}
	return h.entries()
}

// withTrees adds the trees the patterns match on this host (filepath.Glob's patterns, which are
// fixed here and never malformed).
func (h hostImage) withTrees(patterns ...string) hostImage {
	for _, pattern := range patterns {
		m, _ := filepath.Glob(pattern)
		h.trees = append(h.trees, m...)
	}
	return h
}

// The OpenMPI image with ssh, local/openmpi-ssh:1: local/openmpi:1 plus Debian's ssh client and
// sshd, set up as an MPI image for ssh launchers is (sshd_config as the package ships it, the
// privilege separation user), for `submit --launcher mpi-ssh`. Host keys and authorized keys
// are not in it: the job brings its own.
const (
	ImageOpenMPISSH    = "openmpi-ssh"
	OpenMPISSHImageRef = "docker.io/local/openmpi-ssh:1"
)

// sshPackages are what the image adds to the OpenMPI one.
const sshPackages = "openssh-client openssh-server"

// sshPrograms are the client and the server; sshConfigs their settings as Debian ships them
// (Debian's sshd_config has UsePAM yes, which the job's sshd overrides: the image has no PAM).
var (
	sshPrograms = []string{"/usr/bin/ssh", "/usr/sbin/sshd"}
	sshConfigs  = []string{"/etc/ssh/ssh_config", "/etc/ssh/sshd_config"}
)

// sshPasswd is the image's /etc/passwd: Debian's sshd refuses to start without its privilege
// separation user.
const sshPasswd = "root:x:0:0:root:/root:/bin/bash\nsshd:x:100:65534::/run/sshd:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"

// OpenMPISSHUnavailable says why the OpenMPI image with ssh cannot be built on the host whose
// root is root ("/" outside tests), or "" when it can.
func OpenMPISSHUnavailable(root string) string {
	if why := OpenMPIUnavailable(root); why != "" {
		return why
	}
	for _, p := range append(append([]string(nil), sshPrograms...), sshConfigs...) {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			return fmt.Sprintf("%s is not installed on this host (no %s): `apt-get install --no-install-recommends %s` (as .ci/run does)", sshPackages, p, sshPackages)
		}
	}
	return ""
}

// openMPISSHImageEntries collects the OpenMPI image with ssh from this host.
func openMPISSHImageEntries() ([]release.LayerEntry, error) {
	h := hostImage{
		programs: append(append([]string(nil), openMPIPrograms...), sshPrograms...),
		trees:    sshConfigs,
		extra: []release.LayerEntry{
			{Path: "usr/bin/mpirun", Link: "mpirun.openmpi"},
			{Path: "usr/bin/mpiexec", Link: "mpiexec.openmpi"},
			{Path: "etc/passwd", Mode: 0o644, Data: []byte(sshPasswd)},
		},
	}
	h, err := h.withTrees(openMPIDirs...).withPython("mpi4py")
	if err != nil {
		return nil, err
	}
	return h.entries()
}
