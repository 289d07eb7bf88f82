package jobspec

import (
	"crypto/ed25519"
	"encoding/pem"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"golang.org/x/crypto/ssh"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// An mpi-ssh job (submit --launcher mpi-ssh) is an MPI job whose launcher reaches the pods over
// the image's own ssh and sshd instead of the supervisor's agent, as MPI Operator v2 and
// Kubeflow Trainer's MPI plugin launch: for images whose MPI setup expects ssh. submit makes
// the job two key pairs of its own, a client key and a host key, kept in the Secret
// MPISecretName beside the agent key and mounted at SSHDir, so that the launcher's ssh logs in
// with a key no other job holds and checks each pod's sshd against a host key no other job
// holds (no trust on first use). Their public halves are not secret and ship in the MPI
// ConfigMap, with the ssh client's settings:
//
//   - every pod's supervisor runs the image's sshd on MPISSHPort, with the job's host key and
//     authorized key (sshd -o, over whatever the image's sshd_config says);
//   - mpirun and hydra run MPISSHClient, a link to the supervisor's binary that execs the
//     image's ssh with SSHConfigKey's settings (-F), since hydra takes its launcher as one path
//     with no arguments.
//
// The supervisor's agent still serves on every pod, for rank 0's bounded wait and its word that
// the world ended, but runs nothing for the launcher.
const (
	// LauncherMPISSH is --launcher mpi-ssh.
	LauncherMPISSH Launcher = "mpi-ssh"
	// SSHDir is where the job's private keys are mounted, readable by the owner only (sshd and
	// ssh refuse a private key others may read).
	SSHDir = "/tao-ssh"
	// SSHVolume names the volume of the keys.
	SSHVolume = "tao-ssh"
	// SSHClientKeyKey and SSHHostKeyKey are the private keys' keys in the Secret: the first is
	// the key of kubernetes.io/ssh-auth Secrets.
	SSHClientKeyKey = "ssh-privatekey"
	SSHHostKeyKey   = "ssh-host-key"
	// SSHClientKeyFile and SSHHostKeyFile are their names in SSHDir.
	SSHClientKeyFile = "id_ed25519"
	SSHHostKeyFile   = "ssh_host_ed25519_key"
	// AuthorizedKeysKey, KnownHostsKey and SSHConfigKey are the public halves and the ssh
	// client's settings in the MPI ConfigMap, and their names in MPIDir.
	AuthorizedKeysKey = "authorized_keys"
	KnownHostsKey     = "known_hosts"
	SSHConfigKey      = "ssh_config"
	// MPISSHClient is the launcher's remote shell in an mpi-ssh job: a link to the supervisor's
	// binary, which runs `stage mpi-ssh` when called by that name.
	MPISSHClient = s3layout.StagerDir + "/tao-mpi-ssh"
	// EnvMPISSHPort is the port every pod's sshd listens on (MPISSHPort).
	EnvMPISSHPort = "TAO_MPI_SSH_PORT"
)

// MPISSH reports whether the spec is an mpi-ssh job.
func (s *Spec) MPISSH() bool { return s.Launcher == LauncherMPISSH }

// MPISSHPort is where every pod of an mpi-ssh job runs sshd: the port after the agent's.
func (s Spec) MPISSHPort() int { return s.MasterPort + 3 }

// SSHKeys are an mpi-ssh job's key pairs, made by submit: the private keys in OpenSSH's PEM
// form, the public ones as authorized_keys lines.
type SSHKeys struct {
	ClientPrivate, HostPrivate []byte
	ClientPublic, HostPublic   string
}

// NewSSHKeys makes an mpi-ssh job's two ed25519 key pairs from the random source r.
func NewSSHKeys(r io.Reader) (*SSHKeys, error) {
	var k SSHKeys
	var err error
	if k.ClientPrivate, k.ClientPublic, err = newSSHKey(r, "kubectl-tao launcher"); err != nil {
		return nil, err
	}
	if k.HostPrivate, k.HostPublic, err = newSSHKey(r, "kubectl-tao host"); err != nil {
		return nil, err
	}
	return &k, nil
}

func newSSHKey(r io.Reader, comment string) (private []byte, public string, err error) {
	pub, priv, err := ed25519.GenerateKey(r)
	if err != nil {
		return nil, "", fmt.Errorf("making the job's ssh keys: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, "", fmt.Errorf("making the job's ssh keys: %w", err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, "", fmt.Errorf("making the job's ssh keys: %w", err)
	}
	return pem.EncodeToMemory(block), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub))) + " " + comment, nil
}

// KnownHosts is the known_hosts of an mpi-ssh job: its host key for every pod's name, on the
// job's sshd port (ssh looks a host on another port than 22 up as "[HOST]:PORT").
func KnownHosts(job string, port int, hostPublic string) string {
	return fmt.Sprintf("*.%s,[*.%s]:%d %s\n", job, job, port, hostPublic)
}

// SSHConfig is the ssh client's settings in an mpi-ssh job, read with -F in place of the user's
// and the system's: the job's key only, the job's host key only (no prompt, no trust on first
// use), no password prompt that would hang mpirun, and ssh's own chatter off so that only real
// errors reach the launcher's output.
func SSHConfig(port int) string {
	return strings.Join([]string{
		"# kubectl-tao: how an mpi-ssh job's launcher reaches its pods",
		"Host *",
		"  Port " + strconv.Itoa(port),
		"  IdentityFile " + path.Join(SSHDir, SSHClientKeyFile),
		"  IdentitiesOnly yes",
		"  UserKnownHostsFile " + path.Join(MPIDir, KnownHostsKey),
		"  GlobalKnownHostsFile /dev/null",
		"  StrictHostKeyChecking yes",
		"  CheckHostIP no",
		"  BatchMode yes",
		"  LogLevel ERROR",
		"",
	}, "\n")
}

// sshConfigData is what an mpi-ssh job adds to the MPI ConfigMap.
func sshConfigData(s Spec) map[string]string {
	if !s.MPISSH() || s.SSHKeys == nil {
		return nil
	}
	return map[string]string{
		AuthorizedKeysKey: s.SSHKeys.ClientPublic + "\n",
		KnownHostsKey:     KnownHosts(s.Name, s.MPISSHPort(), s.SSHKeys.HostPublic),
		SSHConfigKey:      SSHConfig(s.MPISSHPort()),
	}
}

// sshSecretData is what an mpi-ssh job adds to the MPI Secret.
func sshSecretData(s Spec) map[string][]byte {
	if !s.MPISSH() || s.SSHKeys == nil {
		return nil
	}
	return map[string][]byte{SSHClientKeyKey: s.SSHKeys.ClientPrivate, SSHHostKeyKey: s.SSHKeys.HostPrivate}
}

// sshVolume mounts the private keys, read-only and readable by their owner only: ssh and sshd
// refuse a key file of theirs that others may read.
func sshVolume(s Spec, pod *corev1.PodSpec) {
	if !s.MPISSH() {
		return
	}
	pod.Volumes = append(pod.Volumes, corev1.Volume{
		Name: SSHVolume,
		VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  MPISecretName(s.Name),
			DefaultMode: ptr.To[int32](0o400),
			Items: []corev1.KeyToPath{
				{Key: SSHClientKeyKey, Path: SSHClientKeyFile},
				{Key: SSHHostKeyKey, Path: SSHHostKeyFile},
			},
		}},
	})
	c := &pod.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: SSHVolume, MountPath: SSHDir, ReadOnly: true})
}
