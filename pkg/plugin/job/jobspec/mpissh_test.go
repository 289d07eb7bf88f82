package jobspec

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func mpiSSHSpec(t *testing.T) Spec {
	t.Helper()
	s := mpiSpec()
	s.Launcher = LauncherMPISSH
	keys, err := NewSSHKeys(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s.SSHKeys = keys
	return s
}

// The key pairs are OpenSSH's own forms: the private keys parse as ssh and sshd read them, and
// each matches its authorized_keys line.
func TestNewSSHKeys(t *testing.T) {
	k, err := NewSSHKeys(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for name, pair := range map[string]struct {
		private []byte
		public  string
	}{"client": {k.ClientPrivate, k.ClientPublic}, "host": {k.HostPrivate, k.HostPublic}} {
		if !bytes.HasPrefix(pair.private, []byte("-----BEGIN OPENSSH PRIVATE KEY-----\n")) {
			t.Errorf("%s key: %.40q, want OpenSSH's PEM form", name, pair.private)
		}
		signer, err := ssh.ParsePrivateKey(pair.private)
		if err != nil {
			t.Fatalf("%s key: %v", name, err)
		}
		pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(pair.public))
		if err != nil {
			t.Fatalf("%s public line %q: %v", name, pair.public, err)
		}
		if !bytes.Equal(pub.Marshal(), signer.PublicKey().Marshal()) || pub.Type() != ssh.KeyAlgoED25519 {
			t.Errorf("%s: the public line %q is not the private key's", name, pair.public)
		}
	}
	if k.ClientPublic == k.HostPublic {
		t.Error("the client and host keys are one key")
	}
	if _, err := NewSSHKeys(bytes.NewReader(nil)); err == nil {
		t.Error("an empty random source made keys")
	}
}

// The known_hosts line vouches for the job's own pods, on the sshd port, and for nothing else:
// read with x/crypto's knownhosts, which matches hosts as OpenSSH does.
func TestKnownHosts(t *testing.T) {
	k, err := NewSSHKeys(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(file, []byte(KnownHosts("allreduce", 29503, k.HostPublic)), 0o600); err != nil {
		t.Fatal(err)
	}
	check, err := knownhosts.New(file)
	if err != nil {
		t.Fatal(err)
	}
	host, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(k.HostPublic))
	other, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(k.ClientPublic))
	addr := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 29503}
	for _, h := range []string{"allreduce-0.allreduce:29503", "allreduce-1.allreduce:29503", "allreduce-1.allreduce:22"} {
		if err := check(h, addr, host); err != nil {
			t.Errorf("%s: %v, want the job's host key accepted", h, err)
		}
	}
	if err := check("allreduce-1.allreduce:29503", addr, other); err == nil {
		t.Error("another key was accepted for the job's pod")
	}
	if err := check("other-1.other:29503", addr, host); err == nil {
		t.Error("another job's pod was vouched for")
	}
}

func TestBuildMPISSH(t *testing.T) {
	s := mpiSSHSpec(t)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	objs := Build(s)
	cm, secret, svc := mpiChildren(objs)
	if objs.Job.Annotations[LauncherAnnotation] != "mpi-ssh" {
		t.Errorf("annotations %v, want the launcher", objs.Job.Annotations)
	}
	if cm.Data[AuthorizedKeysKey] != s.SSHKeys.ClientPublic+"\n" || cm.Data[KnownHostsKey] != KnownHosts("allreduce", 29503, s.SSHKeys.HostPublic) ||
		cm.Data[SSHConfigKey] != SSHConfig(29503) || cm.Data[HostfileKey] != Hostfile("allreduce", 2, 4) {
		t.Errorf("ConfigMap %v: want the hostfiles, the public keys and the ssh settings", cm.Data)
	}
	for _, want := range []string{"Port 29503", "IdentityFile /tao-ssh/id_ed25519", "UserKnownHostsFile /tao-mpi/known_hosts", "StrictHostKeyChecking yes", "BatchMode yes"} {
		if !strings.Contains(cm.Data[SSHConfigKey], "  "+want+"\n") {
			t.Errorf("ssh_config lacks %q:\n%s", want, cm.Data[SSHConfigKey])
		}
	}
	if !bytes.Equal(secret.Data[SSHClientKeyKey], s.SSHKeys.ClientPrivate) || !bytes.Equal(secret.Data[SSHHostKeyKey], s.SSHKeys.HostPrivate) ||
		string(secret.Data[MPIKeyKey]) != testMPIKey {
		t.Errorf("Secret keys %v: want the agent key and both private keys", len(secret.Data))
	}
	if len(svc.Spec.Ports) != 3 || svc.Spec.Ports[2].Name != "mpi-ssh" || svc.Spec.Ports[2].Port != 29503 {
		t.Errorf("Service ports %+v: want rendezvous, agent and ssh", svc.Spec.Ports)
	}
	pod := objs.Job.Spec.Template.Spec
	var vol *corev1.Volume
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == SSHVolume {
			vol = &pod.Volumes[i]
		}
	}
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName != "allreduce-mpi" || *vol.Secret.DefaultMode != 0o400 || len(vol.Secret.Items) != 2 {
		t.Fatalf("volume %+v: want the Secret's two private keys only, mode 0400", vol)
	}
	c := pod.Containers[0]
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == SSHVolume && m.MountPath == SSHDir && m.ReadOnly)
	}
	if !mounted {
		t.Errorf("mounts %+v, want the keys read-only at %s", c.VolumeMounts, SSHDir)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	for name, want := range map[string]string{
		EnvLauncher: "mpi-ssh", EnvOMPIRshAgent: MPISSHClient, EnvPRTERshAgent: MPISSHClient, EnvPRTESshAgent: MPISSHClient,
		EnvHydraLauncher: "ssh", EnvHydraLauncherExec: MPISSHClient, EnvMPISSHPort: "29503", EnvMPIAgentPort: "29502",
	} {
		if env[name] != want {
			t.Errorf("%s = %q, want %q", name, env[name], want)
		}
	}
	if !MPIPod(&pod) {
		t.Error("an mpi-ssh job's pod is not read as an MPI job's")
	}
	// Only the Secret carries the private keys.
	for _, obj := range append([]runtime.Object{objs.Job}, objs.Children...) {
		if _, ok := obj.(*corev1.Secret); ok {
			continue
		}
		b, _ := json.Marshal(obj)
		if strings.Contains(string(b), "PRIVATE KEY") {
			t.Errorf("%T carries a private key", obj)
		}
	}
}

func TestValidateMPISSH(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*Spec)
		want   string
	}{
		"no keys":  {func(s *Spec) { s.SSHKeys = nil }, "internal error: an mpi-ssh job without its ssh keys"},
		"ssh port": {func(s *Spec) { s.MasterPort = 65533 }, "invalid --master-port 65533 with --launcher mpi-ssh: sshd uses the port three above it"},
		"elastic": {func(s *Spec) { s.Nodes, s.NodesMin, s.NodesMax, s.Retries = 2, 1, 3, 3 },
			"--launcher mpi-ssh cannot go with --nodes MIN:MAX"},
		"volume at /tao-ssh": {func(s *Spec) { s.Volumes = []Volume{{Claim: "c", MountPath: "/tao-ssh"}} },
			"--volume /tao-ssh: the path /tao-ssh is reserved for the job's ssh keys"},
		"file in /tao-ssh": {func(s *Spec) { s.Files = []File{{ContainerPath: "/tao-ssh/id_rsa", Data: []byte("x")}} },
			"--file /tao-ssh/id_rsa: the path /tao-ssh is reserved for the job's ssh keys"},
		"port env": {func(s *Spec) { s.Env = []KeyValue{{EnvMPISSHPort, "22"}} }, `invalid --env "TAO_MPI_SSH_PORT": --launcher mpi-ssh sets it`},
	} {
		s := mpiSSHSpec(t)
		tc.mutate(&s)
		err := s.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	// /tao-ssh is the user's in any other job.
	s := mpiSpec()
	s.Volumes = []Volume{{Claim: "c", MountPath: "/tao-ssh"}}
	if err := s.Validate(); err != nil {
		t.Errorf("an mpi job with a volume at /tao-ssh: %v", err)
	}
}
