package localcluster

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kubectl-tao/kubectl-tao/hack/release"
)

// The OpenMPI image, local/openmpi:1: Debian's openmpi-bin and python3-mpi4py copied from the
// host as they lie (hostImage), so the real node runs real mpirun, orted and MPI processes for
// `submit --launcher mpi` without a registry. It has no sshd: the job's agent is mpirun's remote
// shell. It exists only where both packages are installed (`.ci/run` installs them); elsewhere
// the launcher says why and the MPI test skips, or fails under CI.

// Image role and reference.
const (
	ImageOpenMPI    = "openmpi"
	OpenMPIImageRef = "docker.io/local/openmpi:1"
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
	for _, pattern := range openMPIDirs {
		m, err := filepath.Glob(pattern)
		if err != nil {
			return nil, err
		}
		h.trees = append(h.trees, m...)
	}
	h, err := h.withPython("mpi4py")
	if err != nil {
		return nil, err
	}
	return h.entries()
}
