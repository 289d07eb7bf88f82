package jobspec

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// Launcher is --launcher: how the processes of a multi-node job start.
type Launcher string

const (
	// LauncherTorchrun is the default: every pod runs the command, and its ranks meet at a
	// rendezvous (torchrun, or any program that reads the rendezvous variables).
	LauncherTorchrun Launcher = "torchrun"
	// LauncherMPI has rank 0's pod run the command (mpirun, or deepspeed over a hostfile), which
	// starts the processes on every pod through the supervisor's agent; the other pods wait to
	// be started.
	LauncherMPI Launcher = "mpi"
)

// Launchers are --launcher's values, the default first.
var Launchers = []Launcher{LauncherTorchrun, LauncherMPI, LauncherMPISSH}

// IsMPI reports whether a launcher, as a job's pods read it from EnvLauncher, is an MPI one.
func IsMPI(l Launcher) bool { return l == LauncherMPI || l == LauncherMPISSH }

// ParseLauncher reads --launcher.
func ParseLauncher(v string) (Launcher, error) {
	l := Launcher(strings.TrimSpace(v))
	if !slices.Contains(Launchers, l) {
		return "", fmt.Errorf("%q is not a launcher: torchrun (every pod runs the command, its ranks meet at a rendezvous), mpi (rank 0's pod runs mpirun or deepspeed, which starts the processes on every pod) or mpi-ssh (the same, over the image's own ssh and sshd)", v)
	}
	return l, nil
}

// MPI reports whether the spec is an MPI job (--launcher mpi or mpi-ssh). It is a multi-node
// job even at one pod: its hostfile names the pod by its Service name, which must resolve.
func (s *Spec) MPI() bool { return IsMPI(s.Launcher) }

// Slots is the number of processes an MPI job's hostfile lets mpirun place on each pod:
// --slots-per-node, else the GPUs per node, and at least one.
func (s *Spec) Slots() int {
	if s.SlotsPerNode > 0 {
		return s.SlotsPerNode
	}
	return max(s.GPUs, 1)
}

// MPIAgentPort is where the supervisor of an MPI job's every pod serves the agent: two ports
// after the rendezvous port, as the port after it is the supervisors' own (SupervisorPort).
func (s Spec) MPIAgentPort() int { return s.MasterPort + 2 }

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
	// MPIDir is where an MPI job's ConfigMap (MPIConfigMapName) is mounted: its hostfiles.
	MPIDir = "/tao-mpi"
	// HostfileKey and HydraHostfileKey are the hostfiles' keys in that ConfigMap, and their
	// names in MPIDir.
	HostfileKey      = "hostfile"
	HydraHostfileKey = "hostfile.hydra"
	// MPIVolume names the volume of the MPI ConfigMap.
	MPIVolume = "tao-mpi"
	// EnvHostfile is the path of the job's OpenMPI and DeepSpeed hostfile, for the user's own
	// command line (`deepspeed --hostfile $TAO_HOSTFILE`, `mpirun --hostfile $TAO_HOSTFILE`).
	EnvHostfile = "TAO_HOSTFILE"
	// EnvOMPIHostfile is OpenMPI 4's default hostfile.
	EnvOMPIHostfile = "OMPI_MCA_orte_default_hostfile"
	// EnvPRTEHostfile is OpenMPI 5's (PRRTE's) default hostfile.
	EnvPRTEHostfile = "PRTE_MCA_prte_default_hostfile"
	// EnvHydraHostfile is MPICH hydra's default hostfile, in its own HOST:K form.
	EnvHydraHostfile = "HYDRA_HOST_FILE"
	// EnvOMPIKeepFQDN and EnvPRTEKeepFQDN keep the hostfile's names whole in OpenMPI 4 and 5
	// (orte_keep_fqdn_hostnames, prte_keep_fqdn_hostnames; both strip the domain by default):
	// NAME-1 alone resolves nowhere, NAME-1.NAME does. MPI Operator v2 sets the first for the
	// same reason.
	EnvOMPIKeepFQDN = "OMPI_MCA_orte_keep_fqdn_hostnames"
	EnvPRTEKeepFQDN = "PRTE_MCA_prte_keep_fqdn_hostnames"
)

// How mpirun starts its daemon on another pod: it runs a remote-shell program as `AGENT HOST
// COMMAND...`, and the job points every implementation at the supervisor's agent, which needs
// nothing in the user's image (no sshd, no keys in files):
//
//   - OpenMPI 4: the plm rsh component's "agent" parameter (orte/mca/plm/rsh/
//     plm_rsh_component.c, so OMPI_MCA_plm_rsh_agent), split on spaces and looked up in PATH;
//   - OpenMPI 5: the same in PRRTE, whose component is rsh in PRRTE 3 (PRTE_MCA_plm_rsh_agent)
//     and ssh from PRRTE 4 (src/mca/plm/ssh/plm_ssh_component.c, PRTE_MCA_plm_ssh_agent);
//   - MPICH 4 (hydra): HYDRA_LAUNCHER=rsh with HYDRA_LAUNCHER_EXEC the program, one path with
//     no arguments (lib/tools/bootstrap/external/external_common_launch.c puts it in argv[0]).
//
// Both implementations hand the agent a command line meant for a remote shell (hydra quotes
// the proxy's path for it), so the agent's server runs it as sshd does, under /bin/sh -c.
// OpenMPI's daemons also start further daemons through the agent (tree spawn), so every pod
// has the agent and the key, not only rank 0's.
//
// The agent authenticates with the job's own key, made by submit and kept in the Secret
// MPISecretName: the pods read it by secretKeyRef, and no manifest, command line or log
// shows it.
const (
	// MPIAgent is the agent program: a link to the supervisor's binary in the stager's
	// directory, which runs as the agent's client when called by that name (one path, as
	// hydra takes it).
	MPIAgent = s3layout.StagerDir + "/tao-mpi-agent"
	// EnvLauncher tells the supervisor the job's launcher (LauncherMPI): rank 0 runs the
	// command, the other pods serve the agent until the job ends.
	EnvLauncher = "TAO_LAUNCHER"
	// EnvMPISlots is the hostfile's slots per pod, for the user's `mpirun -np`.
	EnvMPISlots = "TAO_MPI_SLOTS"
	// EnvMPIAgentPort is the port of every pod's agent server (MPIAgentPort).
	EnvMPIAgentPort = "TAO_MPI_AGENT_PORT"
	// EnvMPIKey is the job's agent key, from the Secret MPISecretName.
	EnvMPIKey = "TAO_MPI_KEY"
	// MPIKeyKey is the key's key in that Secret.
	MPIKeyKey = "key"
	// MinMPIKeyBytes is the shortest key the spec takes: HMAC-SHA256's own size.
	MinMPIKeyBytes = 32
	// The implementations' agent and hostfile settings (see above).
	EnvOMPIRshAgent      = "OMPI_MCA_plm_rsh_agent"
	EnvPRTERshAgent      = "PRTE_MCA_plm_rsh_agent"
	EnvPRTESshAgent      = "PRTE_MCA_plm_ssh_agent"
	EnvHydraLauncher     = "HYDRA_LAUNCHER"
	EnvHydraLauncherExec = "HYDRA_LAUNCHER_EXEC"
	// EnvHydraIface has hydra's proxies call mpiexec back at the address of the pod's network
	// interface (eth0, the name the kubelet asks every CNI plugin for): by default they call the
	// pod's bare hostname, which resolves nowhere but in the pod itself.
	EnvHydraIface = "HYDRA_IFACE"
	// PodInterface is the pod's own network interface.
	PodInterface = "eth0"
	// EnvOMPIForkAgent is OpenMPI 4's fork agent (orte_fork_agent, split on spaces and put
	// before every process's command line by its daemons): MPIProcAgent, so that a process on
	// a pod other than rank 0's prints into that pod's own log.
	EnvOMPIForkAgent = "OMPI_MCA_orte_fork_agent"
	// MPIProcAgent is the fork agent's command: `stage mpi-proc` of the supervisor's binary.
	MPIProcAgent = s3layout.StagerBinary + " stage mpi-proc"
	// LauncherAnnotation is a Job's --launcher when it is not the default, for the commands that
	// read a job (logs, cancel, diagnose) to tell an MPI job apart.
	LauncherAnnotation = "kubectl-tao.dev/launcher"
)

// mpiEnv are the variables kubectl-tao sets in an MPI job; --env and --secret-env may not set
// them.
var mpiEnv = []string{
	EnvHostfile, EnvOMPIHostfile, EnvPRTEHostfile, EnvHydraHostfile, EnvOMPIKeepFQDN, EnvPRTEKeepFQDN, EnvLauncher, EnvMPISlots,
	EnvMPIAgentPort, EnvMPIKey, EnvOMPIRshAgent, EnvPRTERshAgent, EnvPRTESshAgent, EnvHydraLauncher,
	EnvHydraLauncherExec, EnvHydraIface, EnvOMPIForkAgent, EnvMPISSHPort,
}

// MPIEnvNames are the variables kubectl-tao sets in an MPI job.
func MPIEnvNames() []string { return slices.Clone(mpiEnv) }

// MPISecretName is the Secret of an MPI job's agent key; MPIConfigMapName the ConfigMap of its
// hostfiles. Both are created with the Job and owned by it.
func MPISecretName(job string) string { return job + "-mpi" }

// MPIConfigMapName names the ConfigMap that carries an MPI job's hostfiles.
func MPIConfigMapName(job string) string { return job + "-mpi" }

// SlotsWarning is what submit says on stderr about --slots-per-node, "" when nothing: more
// slots than GPUs is allowed (CPU ranks, or ranks that share a GPU) but rarely meant.
func SlotsWarning(s Spec) string {
	if !s.MPI() || s.GPUs == 0 || s.SlotsPerNode <= s.GPUs {
		return ""
	}
	return fmt.Sprintf("--slots-per-node %d is more than the %d GPUs per node: mpirun may start %d processes on each pod, and some of them will share a GPU",
		s.SlotsPerNode, s.GPUs, s.SlotsPerNode)
}

// validateMPI checks --launcher and --slots-per-node, and what cannot go with an MPI job.
func (s *Spec) validateMPI() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.Launcher != "" && !slices.Contains(Launchers, s.Launcher) {
		add("invalid --launcher %q: must be one of torchrun, mpi, mpi-ssh", s.Launcher)
	}
	if s.SlotsPerNode < 0 {
		add("invalid --slots-per-node %d: must be 1 or more (leave it out for one per GPU)", s.SlotsPerNode)
	}
	if !s.MPI() {
		if s.SlotsPerNode != 0 {
			add("--slots-per-node only applies with --launcher mpi or mpi-ssh")
		}
		return errs
	}
	if s.Elastic() {
		add("--launcher %s cannot go with --nodes MIN:MAX: an MPI world is fixed when mpirun starts it, and cannot grow or shrink; give --nodes N", s.Launcher)
	}
	if s.Staging == nil {
		errs = append(errs, errors.New("internal error: an MPI job without the supervisor"))
	}
	if len(s.MPIKey) < MinMPIKeyBytes {
		errs = append(errs, errors.New("internal error: an MPI job without its agent key"))
	}
	if s.MPIAgentPort() > 65535 {
		add("invalid --master-port %d with --launcher %s: the MPI agent uses the port two above it, which must be 65535 or less", s.MasterPort, s.Launcher)
	}
	reserved := map[string]string{MPIDir: "the MPI hostfiles"}
	if s.MPISSH() {
		if s.SSHKeys == nil {
			errs = append(errs, errors.New("internal error: an mpi-ssh job without its ssh keys"))
		}
		if s.MPISSHPort() > 65535 {
			add("invalid --master-port %d with --launcher mpi-ssh: sshd uses the port three above it, which must be 65535 or less", s.MasterPort)
		}
		reserved[SSHDir] = "the job's ssh keys"
	}
	for _, dir := range []string{MPIDir, SSHDir} {
		what, ok := reserved[dir]
		if !ok {
			continue
		}
		for _, v := range s.Volumes {
			if under(path.Clean(v.MountPath), dir) || under(dir, path.Clean(v.MountPath)) {
				add("--volume %s: the path %s is reserved for %s", v.MountPath, dir, what)
			}
		}
		for _, f := range s.Files {
			if under(path.Clean(f.ContainerPath), dir) {
				add("--file %s: the path %s is reserved for %s", f.ContainerPath, dir, what)
			}
		}
	}
	return errs
}

// applyMPI marks an MPI Job and makes rank 0's success the job's: mpirun there ends when every
// process it started has ended, and the Job controller then ends the other pods, whose
// supervisors only serve the agent.
func applyMPI(s Spec, objs *Objects) {
	if !s.MPI() {
		return
	}
	job := objs.Job
	metav1.SetMetaDataAnnotation(&job.ObjectMeta, LauncherAnnotation, string(s.Launcher))
	job.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: ptr.To("0")}}}
	pod := &job.Spec.Template.Spec
	// The hostfiles are fixed by the job's name and size, so they are built here and shipped in
	// a ConfigMap: a dry run shows them, and every pod reads the same ones from its start,
	// before the supervisor or the user's command runs.
	pod.Volumes = append(pod.Volumes, corev1.Volume{
		Name: MPIVolume,
		VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: MPIConfigMapName(s.Name)},
		}},
	})
	c := &pod.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: MPIVolume, MountPath: MPIDir, ReadOnly: true})
	sshVolume(s, pod)
	data := map[string]string{
		HostfileKey:      Hostfile(s.Name, s.Nodes, s.Slots()),
		HydraHostfileKey: HydraHostfile(s.Name, s.Nodes, s.Slots()),
	}
	maps.Copy(data, sshConfigData(s))
	secret := map[string][]byte{MPIKeyKey: s.MPIKey}
	maps.Copy(secret, sshSecretData(s))
	objs.Children = append(objs.Children,
		&corev1.ConfigMap{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{
				Name:      MPIConfigMapName(s.Name),
				Namespace: s.Namespace,
				Labels:    objectLabels(s),
			},
			Immutable: ptr.To(true),
			Data:      data,
		},
		ownedSecret(s, MPISecretName(s.Name), secret),
	)
}

// mpiEnvVars are an MPI job's hostfiles, agent and key (nothing for other jobs).
func mpiEnvVars(s Spec) []corev1.EnvVar {
	if !s.MPI() {
		return nil
	}
	hostfile := path.Join(MPIDir, HostfileKey)
	// The launcher's remote shell: the agent's client, or in an mpi-ssh job the image's ssh
	// (hydra adds ssh's own options when told its launcher is ssh).
	shell, hydra := MPIAgent, "rsh"
	if s.MPISSH() {
		shell, hydra = MPISSHClient, "ssh"
	}
	env := []corev1.EnvVar{
		{Name: EnvLauncher, Value: string(s.Launcher)},
		{Name: EnvHostfile, Value: hostfile},
		{Name: EnvOMPIHostfile, Value: hostfile},
		{Name: EnvPRTEHostfile, Value: hostfile},
		{Name: EnvHydraHostfile, Value: path.Join(MPIDir, HydraHostfileKey)},
		{Name: EnvOMPIKeepFQDN, Value: "true"},
		{Name: EnvPRTEKeepFQDN, Value: "true"},
		{Name: EnvMPISlots, Value: strconv.Itoa(s.Slots())},
		{Name: EnvMPIAgentPort, Value: strconv.Itoa(s.MPIAgentPort())},
		{Name: EnvOMPIRshAgent, Value: shell},
		{Name: EnvPRTERshAgent, Value: shell},
		{Name: EnvPRTESshAgent, Value: shell},
		{Name: EnvHydraLauncher, Value: hydra},
		{Name: EnvHydraLauncherExec, Value: shell},
		{Name: EnvHydraIface, Value: PodInterface},
		{Name: EnvOMPIForkAgent, Value: MPIProcAgent},
		{Name: EnvMPIKey, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: MPISecretName(s.Name)}, Key: MPIKeyKey,
		}}},
	}
	if s.MPISSH() {
		env = append(env, corev1.EnvVar{Name: EnvMPISSHPort, Value: strconv.Itoa(s.MPISSHPort())})
	}
	return env
}

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

// MPIPod reports whether pod is one of an MPI job's (submit --launcher mpi or mpi-ssh), from its training
// container's environment, which a pod keeps even when its Job is gone.
func MPIPod(pod *corev1.PodSpec) bool {
	for _, c := range pod.Containers {
		if c.Name != ContainerName {
			continue
		}
		for _, e := range c.Env {
			if e.Name == EnvLauncher && IsMPI(Launcher(e.Value)) {
				return true
			}
		}
	}
	return false
}
