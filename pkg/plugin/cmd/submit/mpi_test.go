package submit_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/job/jobspec"
	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/cmdtest"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/fixture"
)

func mpiArgs(nodes string, extra ...string) []string {
	return append(append([]string{"allreduce", "--image", "img", "--gpus", "4", "--nodes", nodes, "--launcher", "mpi", "--stager-image", "stager:1"}, extra...),
		"--", "mpirun python3 allreduce.py")
}

func TestSubmitMPI(t *testing.T) {
	c := newClient(fixture.GPUNode("a", 8).Obj())
	r := run(t, cmdtest.Cmd{NS: "ml", Client: c}, mpiArgs("2")...)
	want := "job.batch/allreduce created\nconfigmap/allreduce-mpi created\nsecret/allreduce-mpi created\nservice/allreduce created\n"
	if r.Code != 0 || r.Stdout != want || r.Stderr != "" {
		t.Fatalf("got %+v, want stdout %q", r, want)
	}
	secret, err := c.CoreV1().Secrets("ml").Get(context.Background(), "allreduce-mpi", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := secret.Data[jobspec.MPIKeyKey]
	if len(key) < jobspec.MinMPIKeyBytes {
		t.Fatalf("agent key of %d bytes, want at least %d", len(key), jobspec.MinMPIKeyBytes)
	}
	requestsHoldNone(t, c, string(key))
	// Each job has a key of its own.
	r = run(t, cmdtest.Cmd{NS: "ml", Client: c}, append([]string{"other"}, mpiArgs("2")[1:]...)...)
	if r.Code != 0 {
		t.Fatalf("second job: %+v", r)
	}
	other, err := c.CoreV1().Secrets("ml").Get(context.Background(), "other-mpi", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(other.Data[jobspec.MPIKeyKey]) == string(key) {
		t.Error("two MPI jobs share one agent key")
	}
}

// An mpi-ssh job's Secret holds its private keys, two jobs never share them, and no request
// but the Secret's carries them.
func TestSubmitMPISSH(t *testing.T) {
	c := newClient(fixture.GPUNode("a", 8).Obj())
	args := func(name string) []string {
		return append([]string{name}, mpiArgs("2", "--launcher", "mpi-ssh")[1:]...)
	}
	r := run(t, cmdtest.Cmd{NS: "ml", Client: c}, args("allreduce")...)
	if r.Code != 0 || r.Stderr != "" {
		t.Fatalf("got %+v", r)
	}
	keys := func(name string) (client, host string) {
		secret, err := c.CoreV1().Secrets("ml").Get(context.Background(), name+"-mpi", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return string(secret.Data[jobspec.SSHClientKeyKey]), string(secret.Data[jobspec.SSHHostKeyKey])
	}
	client, host := keys("allreduce")
	if !strings.HasPrefix(client, "-----BEGIN OPENSSH PRIVATE KEY-----") || !strings.HasPrefix(host, "-----BEGIN OPENSSH PRIVATE KEY-----") || client == host {
		t.Fatalf("keys %.40q and %.40q: want two OpenSSH private keys", client, host)
	}
	requestsHoldNone(t, c, client, host)
	cm, err := c.CoreV1().ConfigMaps("ml").Get(context.Background(), "allreduce-mpi", metav1.GetOptions{})
	if err != nil || !strings.HasPrefix(cm.Data[jobspec.AuthorizedKeysKey], "ssh-ed25519 ") || !strings.Contains(cm.Data[jobspec.KnownHostsKey], "*.allreduce,[*.allreduce]:29503 ssh-ed25519 ") {
		t.Errorf("ConfigMap %v (%v): want the public keys", cm.Data, err)
	}
	if r := run(t, cmdtest.Cmd{NS: "ml", Client: c}, args("other")...); r.Code != 0 {
		t.Fatalf("second job: %+v", r)
	}
	if otherClient, otherHost := keys("other"); otherClient == client || otherHost == host {
		t.Error("two mpi-ssh jobs share a key")
	}
}

func TestSubmitMPIDryRunShowsNoKey(t *testing.T) {
	for _, format := range []string{"yaml", "json"} {
		r := run(t, cmdtest.Cmd{ClientErr: errors.New("no cluster for a client dry run")}, mpiArgs("1", "--dry-run=client", "-o", format, "--launcher", "mpi-ssh")...)
		if r.Code != 0 || !strings.Contains(r.Stdout, "REDACTED") || !strings.Contains(r.Stdout, "allreduce-0.allreduce slots=4") {
			t.Fatalf("-o %s: got %+v, want the redacted key and the hostfile", format, r)
		}
		if strings.Contains(r.Stdout, "PRIVATE KEY") || !strings.Contains(r.Stdout, "ssh-ed25519 ") {
			t.Errorf("-o %s: want the public keys shown and no private one:\n%s", format, r.Stdout)
		}
		// The key is hex: no run of 64 hex digits may appear anywhere.
		for _, word := range strings.FieldsFunc(r.Stdout, func(c rune) bool { return !strings.ContainsRune("0123456789abcdef", c) }) {
			if len(word) >= 2*jobspec.MinMPIKeyBytes {
				t.Errorf("-o %s prints %q, which looks like the agent key", format, word)
			}
		}
	}
}

func TestSubmitMPIBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown launcher", []string{"j", "--image", "img", "--launcher", "slurm", "--", "true"},
			`invalid argument "slurm" for "--launcher" flag: "slurm" is not a launcher: torchrun`},
		{"elastic", mpiArgs("1:3"), "--launcher mpi cannot go with --nodes MIN:MAX"},
		{"slots without mpi", []string{"j", "--image", "img", "--slots-per-node", "2", "--", "true"},
			"--slots-per-node only applies with --launcher mpi or mpi-ssh"},
		{"mpi-ssh elastic", mpiArgs("1:3", "--launcher", "mpi-ssh"), "--launcher mpi-ssh cannot go with --nodes MIN:MAX"},
		{"mpi-ssh port", mpiArgs("2", "--launcher", "mpi-ssh", "--master-port", "65533"),
			"invalid --master-port 65533 with --launcher mpi-ssh: sshd uses the port three above it"},
		{"mpi-ssh volume at the keys", mpiArgs("2", "--launcher", "mpi-ssh", "--volume", "data:/tao-ssh"),
			"--volume /tao-ssh: the path /tao-ssh is reserved for the job's ssh keys"},
	} {
		c := newClient(fixture.GPUNode("a", 8).Obj())
		r := run(t, cmdtest.Cmd{NS: "ml", Client: c}, tc.args...)
		if r.Code != int(exitcode.Usage) || !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("%s: got %+v, want exit 2 and %q", tc.name, r, tc.want)
		}
		if m := mutations(c); len(m) > 0 {
			t.Errorf("%s: sent %v", tc.name, m)
		}
	}
}

// Without Job success policies, rank 0's success would never end the pods that wait to be
// stopped.
func TestSubmitMPIRefusesAnOldServer(t *testing.T) {
	c := newClient(fixture.GPUNode("a", 8).Obj())
	c.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: "v1.30.4"}
	r := run(t, cmdtest.Cmd{NS: "ml", Client: c}, mpiArgs("2")...)
	if r.Code != int(exitcode.Usage) || !strings.Contains(r.Stderr, "--launcher mpi needs Kubernetes 1.31 or newer (Job success policies); this cluster runs v1.30.4") {
		t.Errorf("got %+v", r)
	}
	if m := mutations(c); len(m) > 0 {
		t.Errorf("sent %v", m)
	}
}

func TestSubmitMPISlotsAboveGPUsWarns(t *testing.T) {
	r := run(t, cmdtest.Cmd{ClientErr: errors.New("no cluster for a client dry run")}, mpiArgs("1", "--slots-per-node", "6", "--dry-run=client", "-o", "yaml")...)
	if r.Code != 0 || !strings.Contains(r.Stdout, "allreduce-0.allreduce slots=6") ||
		!strings.Contains(r.Stderr, "Warning: --slots-per-node 6 is more than the 4 GPUs per node") {
		t.Fatalf("got %+v", r)
	}
}
