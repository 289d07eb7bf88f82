package jobspec

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

func TestHostfile(t *testing.T) {
	for _, tc := range []struct {
		name         string
		job          string
		nodes, slots int
		want, hydra  string
	}{
		{name: "one host", job: "solo", nodes: 1, slots: 8,
			want: "solo-0.solo slots=8\n", hydra: "solo-0.solo:8\n"},
		{name: "two hosts of four", job: "mpi", nodes: 2, slots: 4,
			want:  "mpi-0.mpi slots=4\nmpi-1.mpi slots=4\n",
			hydra: "mpi-0.mpi:4\nmpi-1.mpi:4\n"},
		{name: "one slot each, ranks in index order", job: "a", nodes: 3, slots: 1,
			want:  "a-0.a slots=1\na-1.a slots=1\na-2.a slots=1\n",
			hydra: "a-0.a:1\na-1.a:1\na-2.a:1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, Hostfile(tc.job, tc.nodes, tc.slots)); d != "" {
				t.Errorf("Hostfile (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.hydra, HydraHostfile(tc.job, tc.nodes, tc.slots)); d != "" {
				t.Errorf("HydraHostfile (-want +got):\n%s", d)
			}
		})
	}
}

func TestPodHost(t *testing.T) {
	if got, want := PodHost("ddp", 11), "ddp-11.ddp"; got != want {
		t.Errorf("PodHost = %q, want %q", got, want)
	}
}

// deepSpeedHostPattern and parseDeepSpeedHostfile transcribe _parse_hostfile of DeepSpeed's
// launcher (deepspeedai/DeepSpeed, deepspeed/launcher/runner.py): each stripped line is
// skipped when it starts with "#" or is empty, must otherwise match ^(\S+)\s+slots=(\d+)
// (re.search, so anything after the digits is ignored), may not name a host twice, and the
// file must name at least one host. Python's \s and \S are Unicode-aware, Go's ASCII-only:
// the same for the ASCII names a job has.
var deepSpeedHostPattern = regexp.MustCompile(`^(\S+)\s+slots=(\d+)`)

type deepSpeedHost struct {
	host  string
	slots int
}

func parseDeepSpeedHostfile(text string) ([]deepSpeedHost, error) {
	var pool []deepSpeedHost
	seen := map[string]bool{}
	// fd.readlines() keeps each line's "\n", which line.strip() then removes.
	for _, line := range strings.SplitAfter(text, "\n") {
		line = strings.TrimSpace(line)
		match := deepSpeedHostPattern.FindStringSubmatch(line)
		switch {
		case strings.HasPrefix(line, "#") || line == "":
			continue
		case match != nil:
			if seen[match[1]] {
				return nil, fmt.Errorf("Hostfile contains multiple entries for %s, unable to proceed with launching", match[1])
			}
			seen[match[1]] = true
			n, err := strconv.Atoi(match[2])
			if err != nil {
				return nil, err
			}
			pool = append(pool, deepSpeedHost{host: match[1], slots: n})
		default:
			return nil, fmt.Errorf("Hostfile contains a bad entry: %s, unable to proceed with launching", line)
		}
	}
	if len(pool) == 0 {
		return nil, fmt.Errorf("Hostfile is empty or not formatted correctly, unable to proceed with launching.")
	}
	return pool, nil
}

func TestHostfileReadByDeepSpeed(t *testing.T) {
	// The transcription itself refuses what DeepSpeed refuses.
	for _, bad := range []string{"", "# only a comment\n", "host\n", "a slots=1\na slots=2\n", "a:4\n"} {
		if _, err := parseDeepSpeedHostfile(bad); err == nil {
			t.Errorf("parseDeepSpeedHostfile(%q) accepted it, DeepSpeed refuses it", bad)
		}
	}
	for _, tc := range []struct{ nodes, slots int }{{1, 1}, {1, 8}, {2, 4}, {16, 8}} {
		got, err := parseDeepSpeedHostfile(Hostfile("train", tc.nodes, tc.slots))
		if err != nil {
			t.Fatalf("%d nodes of %d slots: DeepSpeed would refuse the hostfile: %v", tc.nodes, tc.slots, err)
		}
		var want []deepSpeedHost
		for i := range tc.nodes {
			want = append(want, deepSpeedHost{host: PodHost("train", i), slots: tc.slots})
		}
		if d := cmp.Diff(want, got, cmp.AllowUnexported(deepSpeedHost{})); d != "" {
			t.Errorf("%d nodes of %d slots: DeepSpeed reads (-want +got):\n%s", tc.nodes, tc.slots, d)
		}
	}
}

// testMPIKey is a fake agent key: what the golden file and the leak checks look for.
const testMPIKey = "golden-mpi-key-0123456789abcdef0123456789"

func mpiSpec() Spec {
	s := validSpec()
	s.Name, s.Nodes, s.GPUs, s.Launcher, s.MPIKey = "allreduce", 2, 4, LauncherMPI, []byte(testMPIKey)
	s.Command = []string{"mpirun python3 allreduce.py"}
	s.Staging = &Staging{StagerImage: "stager:1", NoS3: true, NoLogArchive: true}
	return s
}

func TestParseLauncher(t *testing.T) {
	for _, v := range []string{"torchrun", "mpi", " mpi ", "mpi-ssh"} {
		if _, err := ParseLauncher(v); err != nil {
			t.Errorf("ParseLauncher(%q): %v", v, err)
		}
	}
	for _, v := range []string{"", "MPI", "ssh", "deepspeed"} {
		if _, err := ParseLauncher(v); err == nil || !strings.Contains(err.Error(), "torchrun (every pod runs the command") {
			t.Errorf("ParseLauncher(%q) = %v, want the launchers named", v, err)
		}
	}
}

func TestValidateMPI(t *testing.T) {
	for name, mutate := range map[string]func(*Spec){
		"two pods":              func(*Spec) {},
		"one pod":               func(s *Spec) { s.Nodes = 1 },
		"slots above the GPUs":  func(s *Spec) { s.SlotsPerNode = 16 },
		"no GPUs, four slots":   func(s *Spec) { s.GPUs, s.SlotsPerNode = 0, 4 },
		"a user env of its own": func(s *Spec) { s.Env = []KeyValue{{"OMPI_MCA_btl", "tcp,self"}} },
		"retries":               func(s *Spec) { s.Retries = 1 },
	} {
		s := mpiSpec()
		mutate(&s)
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, tc := range map[string]struct {
		mutate func(*Spec)
		want   string
	}{
		"elastic": {func(s *Spec) { s.Nodes, s.NodesMin, s.NodesMax, s.Retries = 2, 1, 3, 3 },
			"--launcher mpi cannot go with --nodes MIN:MAX: an MPI world is fixed when mpirun starts it"},
		"negative slots": {func(s *Spec) { s.SlotsPerNode = -1 }, "invalid --slots-per-node -1: must be 1 or more"},
		"slots without mpi": {func(s *Spec) { s.Launcher, s.SlotsPerNode = LauncherTorchrun, 2 },
			"--slots-per-node only applies with --launcher mpi"},
		"unknown launcher": {func(s *Spec) { s.Launcher = "slurm" }, `invalid --launcher "slurm"`},
		"no key":           {func(s *Spec) { s.MPIKey = nil }, "internal error: an MPI job without its agent key"},
		"no supervisor":    {func(s *Spec) { s.Staging = nil }, "internal error: an MPI job without the supervisor"},
		"agent port":       {func(s *Spec) { s.MasterPort = 65534 }, "the MPI agent uses the port two above it"},
		"hostfile env":     {func(s *Spec) { s.Env = []KeyValue{{EnvHostfile, "/h"}} }, `invalid --env "TAO_HOSTFILE": --launcher mpi sets it`},
		"agent env secret": {func(s *Spec) { s.SecretEnv = []KeyValue{{EnvOMPIRshAgent, "ssh"}} }, `invalid --secret-env "OMPI_MCA_plm_rsh_agent": --launcher mpi sets it`},
		"file in /tao-mpi": {func(s *Spec) { s.Files = []File{{ContainerPath: "/tao-mpi/hostfile", Data: []byte("x")}} },
			"--file /tao-mpi/hostfile: the path /tao-mpi is reserved for the MPI hostfiles"},
		"volume at /tao-mpi/x": {func(s *Spec) { s.Volumes = []Volume{{Claim: "c", MountPath: "/tao-mpi/x"}} },
			"--volume /tao-mpi/x: the path /tao-mpi is reserved for the MPI hostfiles"},
		"name not a DNS-1035 label at one pod": {func(s *Spec) { s.Name, s.Nodes = "1job", 1 }, "for a multi-node job (it also names the rendezvous Service)"},
	} {
		s := mpiSpec()
		tc.mutate(&s)
		err := s.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

func TestSlotsWarning(t *testing.T) {
	for _, tc := range []struct {
		name          string
		gpus, slots   int
		launcher      Launcher
		wantSubstring string
	}{
		{name: "default slots", gpus: 8, launcher: LauncherMPI},
		{name: "fewer slots than GPUs", gpus: 8, slots: 4, launcher: LauncherMPI},
		{name: "as many as GPUs", gpus: 8, slots: 8, launcher: LauncherMPI},
		{name: "no GPU limit", slots: 32, launcher: LauncherMPI},
		{name: "more than GPUs", gpus: 4, slots: 6, launcher: LauncherMPI,
			wantSubstring: "--slots-per-node 6 is more than the 4 GPUs per node: mpirun may start 6 processes on each pod"},
		{name: "torchrun", gpus: 4, slots: 6, launcher: LauncherTorchrun},
	} {
		s := mpiSpec()
		s.GPUs, s.SlotsPerNode, s.Launcher = tc.gpus, tc.slots, tc.launcher
		got := SlotsWarning(s)
		if (tc.wantSubstring == "") != (got == "") || !strings.Contains(got, tc.wantSubstring) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.wantSubstring)
		}
	}
}

func TestSlots(t *testing.T) {
	for _, tc := range []struct{ gpus, slots, want int }{{8, 0, 8}, {0, 0, 1}, {8, 2, 2}, {0, 3, 3}} {
		s := Spec{GPUs: tc.gpus, SlotsPerNode: tc.slots}
		if got := s.Slots(); got != tc.want {
			t.Errorf("Slots() of %d GPUs, --slots-per-node %d = %d, want %d", tc.gpus, tc.slots, got, tc.want)
		}
	}
}

// The MPI job's contract, checked on the objects rather than on the golden text.
// mpiChildren are an MPI job's ConfigMap, Secret and Service.
func mpiChildren(objs Objects) (cm *corev1.ConfigMap, secret *corev1.Secret, svc *corev1.Service) {
	for _, obj := range objs.Children {
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			cm = o
		case *corev1.Secret:
			secret = o
		case *corev1.Service:
			svc = o
		}
	}
	return cm, secret, svc
}

func TestBuildMPI(t *testing.T) {
	for _, nodes := range []int{1, 3} {
		s := mpiSpec()
		s.Nodes, s.SlotsPerNode = nodes, 2
		objs := Build(s)
		job := objs.Job
		pod := job.Spec.Template.Spec
		if *job.Spec.CompletionMode != batchv1.IndexedCompletion || pod.Subdomain != s.Name || *job.Spec.Completions != int32(nodes) {
			t.Errorf("%d pods: completion mode %v, subdomain %q, completions %d: want an Indexed Job of %d under its Service",
				nodes, job.Spec.CompletionMode, pod.Subdomain, *job.Spec.Completions, nodes)
		}
		if job.Annotations[LauncherAnnotation] != "mpi" || job.Spec.SuccessPolicy == nil || *job.Spec.SuccessPolicy.Rules[0].SucceededIndexes != "0" {
			t.Errorf("%d pods: annotations %v, success policy %+v: want the launcher and rank 0's success", nodes, job.Annotations, job.Spec.SuccessPolicy)
		}
		cm, secret, svc := mpiChildren(objs)
		if cm == nil || cm.Name != "allreduce-mpi" || cm.Data[HostfileKey] != Hostfile(s.Name, nodes, 2) || cm.Data[HydraHostfileKey] != HydraHostfile(s.Name, nodes, 2) {
			t.Fatalf("%d pods: ConfigMap %+v: want both hostfiles of %d pods of 2 slots", nodes, cm, nodes)
		}
		if secret == nil || secret.Name != "allreduce-mpi" || string(secret.Data[MPIKeyKey]) != testMPIKey || !*secret.Immutable {
			t.Fatalf("%d pods: Secret %+v: want the key, immutable", nodes, secret)
		}
		if svc == nil || len(svc.Spec.Ports) != 2 || svc.Spec.Ports[1].Port != int32(s.MPIAgentPort()) {
			t.Fatalf("%d pods: Service %+v: want the rendezvous and agent ports", nodes, svc)
		}
		c := pod.Containers[0]
		env := map[string]corev1.EnvVar{}
		for _, e := range c.Env {
			env[e.Name] = e
		}
		for name, want := range map[string]string{
			EnvHostfile: "/tao-mpi/hostfile", EnvOMPIHostfile: "/tao-mpi/hostfile", EnvPRTEHostfile: "/tao-mpi/hostfile",
			EnvHydraHostfile: "/tao-mpi/hostfile.hydra", EnvOMPIRshAgent: MPIAgent, EnvPRTERshAgent: MPIAgent,
			EnvPRTESshAgent: MPIAgent, EnvHydraLauncher: "rsh", EnvHydraLauncherExec: MPIAgent, EnvLauncher: "mpi",
			EnvMPISlots: "2", EnvMPIAgentPort: "29502", EnvMasterAddr: "allreduce-0.allreduce",
			EnvOMPIKeepFQDN: "true", EnvPRTEKeepFQDN: "true", EnvHydraIface: "eth0",
			EnvOMPIForkAgent: "/tao-stager/kubectl-tao stage mpi-proc",
		} {
			if got := env[name]; got.Value != want || got.ValueFrom != nil {
				t.Errorf("%d pods: %s = %+v, want %q", nodes, name, got, want)
			}
		}
		if ref := env[EnvMPIKey].ValueFrom; env[EnvMPIKey].Value != "" || ref == nil || ref.SecretKeyRef == nil ||
			ref.SecretKeyRef.Name != "allreduce-mpi" || ref.SecretKeyRef.Key != MPIKeyKey {
			t.Errorf("%d pods: %s = %+v, want a secretKeyRef to allreduce-mpi", nodes, EnvMPIKey, env[EnvMPIKey])
		}
		if c.Command[0] != s3layout.StagerBinary {
			t.Errorf("%d pods: command %q, want the supervisor's", nodes, c.Command)
		}
		mounted := false
		for _, m := range c.VolumeMounts {
			mounted = mounted || (m.Name == MPIVolume && m.MountPath == MPIDir && m.ReadOnly)
		}
		if !mounted {
			t.Errorf("%d pods: mounts %+v, want the MPI ConfigMap read-only at %s", nodes, c.VolumeMounts, MPIDir)
		}
		// Nothing but the Secret carries the key.
		for _, obj := range append([]runtime.Object{job}, objs.Children...) {
			if _, ok := obj.(*corev1.Secret); ok {
				continue
			}
			b, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), testMPIKey) || strings.Contains(string(b), base64.StdEncoding.EncodeToString([]byte(testMPIKey))) {
				t.Errorf("%d pods: %T carries the agent key", nodes, obj)
			}
		}
	}
	// A torchrun job has none of it.
	plain := validSpec()
	plain.Nodes = 2
	objs := Build(plain)
	if len(objs.Children) != 1 || objs.Job.Annotations[LauncherAnnotation] != "" || objs.Job.Spec.SuccessPolicy != nil {
		t.Errorf("torchrun job: %d children, annotations %v, success policy %v: want the Service alone",
			len(objs.Children), objs.Job.Annotations, objs.Job.Spec.SuccessPolicy)
	}
}

// --retries restarts the whole MPI world: each pod is replaced as a torchrun rank is, and rank
// 0's new pod starts mpirun again once every agent answers. The policy is the staged one, since
// the supervisor always runs.
func TestBuildMPIRetries(t *testing.T) {
	s := mpiSpec()
	s.Nodes, s.Retries = 3, 2
	job := Build(s).Job
	if job.Spec.BackoffLimitPerIndex == nil || *job.Spec.BackoffLimitPerIndex != 2 || *job.Spec.MaxFailedIndexes != 0 ||
		*job.Spec.BackoffLimit != 6 || *job.Spec.PodReplacementPolicy != batchv1.Failed {
		t.Errorf("spec %+v: want 2 retries per index, no failed index, replacement once failed", job.Spec)
	}
	if job.Spec.PodFailurePolicy == nil || len(job.Spec.PodFailurePolicy.Rules) != RuleStaging+1 || job.Spec.SuccessPolicy == nil {
		t.Errorf("policy %+v, success %+v: want the staged pod failure policy and rank 0's success", job.Spec.PodFailurePolicy, job.Spec.SuccessPolicy)
	}
}
