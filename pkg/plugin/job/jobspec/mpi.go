package jobspec

import (
	"strconv"
	"strings"
)

// An MPI job's hosts are its pods, by the stable names the headless Service gives them
// (PodHost), each with the same number of slots (processes mpirun may place there). The
// hostfile says so in the two forms MPI launchers read:
//
//   - OpenMPI and DeepSpeed: "HOST slots=K" per line. OpenMPI reads it from its default-hostfile
//     MCA parameter: orte_default_hostfile in OpenMPI 4 (orte/runtime/orte_mca_params.c, so
//     OMPI_MCA_orte_default_hostfile) and prte_default_hostfile in OpenMPI 5's PRRTE
//     (src/runtime/prte_mca_params.c, so PRTE_MCA_prte_default_hostfile). DeepSpeed's launcher
//     reads it from --hostfile (deepspeed/launcher/runner.py, _parse_hostfile).
//   - MPICH's hydra: "HOST:K" per line, from HYDRA_HOST_FILE (src/pm/hydra, the mpich UI's
//     set_default_values reads it when neither -f nor a host list was given).
const (
	// EnvHostfile is the path of the job's OpenMPI and DeepSpeed hostfile, for the user's own
	// command line (`deepspeed --hostfile $TAO_HOSTFILE`, `mpirun --hostfile $TAO_HOSTFILE`).
	EnvHostfile = "TAO_HOSTFILE"
	// EnvOMPIHostfile is OpenMPI 4's default hostfile.
	EnvOMPIHostfile = "OMPI_MCA_orte_default_hostfile"
	// EnvPRTEHostfile is OpenMPI 5's (PRRTE's) default hostfile.
	EnvPRTEHostfile = "PRTE_MCA_prte_default_hostfile"
	// EnvHydraHostfile is MPICH hydra's default hostfile, in its own HOST:K form.
	EnvHydraHostfile = "HYDRA_HOST_FILE"
)

// PodHost is the stable DNS name of a multi-node job's pod of completion index i: the Job's
// pods have the job's name as subdomain, which the headless Service of that name resolves.
func PodHost(job string, i int) string { return job + "-" + strconv.Itoa(i) + "." + job }

// Hostfile is the hostfile of a job of nodes pods with slots slots each, in the format OpenMPI
// and DeepSpeed read ("HOST slots=K"), rank 0's pod first.
func Hostfile(job string, nodes, slots int) string {
	return hostLines(job, nodes, " slots="+strconv.Itoa(slots))
}

// HydraHostfile is the same hosts in MPICH hydra's format ("HOST:K").
func HydraHostfile(job string, nodes, slots int) string {
	return hostLines(job, nodes, ":"+strconv.Itoa(slots))
}

func hostLines(job string, nodes int, suffix string) string {
	var b strings.Builder
	for i := range nodes {
		b.WriteString(PodHost(job, i))
		b.WriteString(suffix)
		b.WriteByte('\n')
	}
	return b.String()
}
