package jobspec

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func validSpec() Spec {
	return Spec{
		Name: "train", Namespace: "default", Image: "nvcr.io/nvidia/tao/tao-toolkit:6.0.0-pyt",
		Command: []string{"python train.py"}, GPUs: 8, Nodes: 1, MasterPort: DefaultMasterPort,
	}
}

func TestValidateAcceptsGoodSpecs(t *testing.T) {
	ttl := time.Hour
	for name, mutate := range map[string]func(*Spec){
		"minimal":             func(*Spec) {},
		"no gpus":             func(s *Spec) { s.GPUs = 0 },
		"multi-node":          func(s *Spec) { s.Nodes = 16 },
		"argv":                func(s *Spec) { s.Command = []string{"python", "-c", "print(1)"} },
		"digit-leading name":  func(s *Spec) { s.Name = "1st-run" },
		"63-char name":        func(s *Spec) { s.Name = strings.Repeat("a", 63) },
		"name fits hostnames": func(s *Spec) { s.Name, s.Nodes = strings.Repeat("a", 61), 10 },
		"ttl":                 func(s *Spec) { s.TTL = &ttl },
		"zero ttl":            func(s *Spec) { zero := time.Duration(0); s.TTL = &zero },
		"env with = in value": func(s *Spec) { s.Env = []KeyValue{{"A", "b=c"}, {"EMPTY", ""}, {"my.var-1", "x"}} },
		"port bounds":         func(s *Spec) { s.MasterPort = 65535 },
		"labels": func(s *Spec) {
			s.Labels = []KeyValue{{"team", "vision"}, {"example.com/tier", ""}}
			s.NodeSelector = []KeyValue{{"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"}}
			s.Annotations = []KeyValue{{"Example.com/Note", "any text: at all"}}
		},
		"single-node reserved env": func(s *Spec) { s.Env = []KeyValue{{"NODE_RANK", "0"}} },
		"resources": func(s *Spec) {
			s.CPU, s.Memory, s.ShmSize = "500m", "64Gi", "16Gi"
			s.Resources = []KeyValue{{"nvidia.com/mig-1g.10gb", "2"}}
		},
		"whole gpus named":           func(s *Spec) { s.GPUResourceName = GPUResource },
		"whole gpus named, no gpus":  func(s *Spec) { s.GPUs, s.GPUResourceName = 0, GPUResource },
		"shared gpus":                func(s *Spec) { s.GPUResourceName = "nvidia.com/gpu.shared" },
		"mig slices":                 func(s *Spec) { s.GPUResourceName = "nvidia.com/mig-3g.40gb" },
		"mig slices and rdma":        func(s *Spec) { s.GPUResourceName, s.Resources = "nvidia.com/mig-1g.10gb", []KeyValue{{"rdma/ib", "1"}} },
		"shm disabled on multi-node": func(s *Spec) { s.Nodes, s.ShmSize, s.Memory = 2, "0", "1Gi" },
		"one retry":                  func(s *Spec) { s.Retries = 1 },
		"most retries":               func(s *Spec) { s.Retries = MaxRetries },
		"retries on multi-node":      func(s *Spec) { s.Nodes, s.Retries = 4, 3 },
	} {
		t.Run(name, func(t *testing.T) {
			s := validSpec()
			mutate(&s)
			if err := s.Validate(); err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
		})
	}
}

func TestValidateRejectsBadInput(t *testing.T) {
	neg, frac := -time.Minute, 1500*time.Millisecond
	tests := []struct {
		name   string
		mutate func(*Spec)
		want   string // a fragment of the message, naming the flag or value at fault
	}{
		{"empty name", func(s *Spec) { s.Name = "" }, "job name is empty"},
		{"uppercase name", func(s *Spec) { s.Name = "Train" }, `invalid job name "Train"`},
		{"underscore name", func(s *Spec) { s.Name = "my_job" }, `invalid job name "my_job"`},
		{"dotted name", func(s *Spec) { s.Name = "a.b" }, `invalid job name "a.b"`},
		{"trailing dash", func(s *Spec) { s.Name = "job-" }, `invalid job name "job-"`},
		{"64-char name", func(s *Spec) { s.Name = strings.Repeat("a", 64) }, "no more than 63 characters"},
		{"multi-node digit-leading name", func(s *Spec) { s.Name, s.Nodes = "1st", 2 }, "rendezvous Service"},
		{"multi-node hostname too long", func(s *Spec) { s.Name, s.Nodes = strings.Repeat("a", 61), 100 }, `pod hostname "aaa`},
		{"bad namespace", func(s *Spec) { s.Namespace = "Prod" }, `invalid namespace "Prod"`},
		{"missing image", func(s *Spec) { s.Image = "" }, "--image is required"},
		{"image with space", func(s *Spec) { s.Image = "busy box" }, `invalid --image "busy box"`},
		{"missing command", func(s *Spec) { s.Command = nil }, `command is required after "--"`},
		{"blank command", func(s *Spec) { s.Command = []string{"  "} }, "command after \"--\" is empty"},
		{"negative gpus", func(s *Spec) { s.GPUs = -1 }, "invalid --gpus -1"},
		{"zero nodes", func(s *Spec) { s.Nodes = 0 }, "invalid --nodes 0"},
		{"negative nodes", func(s *Spec) { s.Nodes = -3 }, "invalid --nodes -3"},
		{"port zero", func(s *Spec) { s.MasterPort = 0 }, "invalid --master-port 0"},
		{"port too high", func(s *Spec) { s.MasterPort = 65536 }, "invalid --master-port 65536"},
		{"negative ttl", func(s *Spec) { s.TTL = &neg }, "invalid --ttl -1m0s"},
		{"fractional ttl", func(s *Spec) { s.TTL = &frac }, "whole number of seconds"},
		{"env key with digit first", func(s *Spec) { s.Env = []KeyValue{{"1A", "x"}} }, `invalid --env "1A"`},
		{"env key with space", func(s *Spec) { s.Env = []KeyValue{{"MY VAR", "x"}} }, `invalid --env "MY VAR"`},
		{"env key with =", func(s *Spec) { s.Env = []KeyValue{{"A=B", "x"}} }, `invalid --env "A=B"`},
		{"env value not UTF-8", func(s *Spec) { s.Env = []KeyValue{{"A", "\xe9t\xe9"}} }, `invalid --env "A": the value is not valid UTF-8`},
		{"command not UTF-8", func(s *Spec) { s.Command = []string{"python", "caf\xe9.py"} }, "word 2 after \"--\" is not valid UTF-8"},
		{"annotation not UTF-8", func(s *Spec) { s.Annotations = []KeyValue{{"note", "\xff"}} }, `invalid --annotation "note"`},
		{"reserved env multi-node", func(s *Spec) { s.Nodes, s.Env = 2, []KeyValue{{"MASTER_ADDR", "x"}} }, `invalid --env "MASTER_ADDR"`},
		{"bad env-from-secret", func(s *Spec) { s.EnvFromSecrets = []string{"Creds"} }, `invalid --env-from-secret "Creds"`},
		{"bad image-pull-secret", func(s *Spec) { s.ImagePullSecrets = []string{"ngc_key"} }, `invalid --image-pull-secret "ngc_key"`},
		{"bad label key", func(s *Spec) { s.Labels = []KeyValue{{"-team", "a"}} }, `invalid --label key "-team"`},
		{"bad label value", func(s *Spec) { s.Labels = []KeyValue{{"team", "a b"}} }, `invalid --label value "a b"`},
		{"long label value", func(s *Spec) { s.Labels = []KeyValue{{"team", strings.Repeat("x", 64)}} }, "invalid --label value"},
		{"reserved label", func(s *Spec) { s.Labels = []KeyValue{{ManagedByLabel, "me"}} }, "reserved"},
		{"controller label", func(s *Spec) { s.Labels = []KeyValue{{"batch.kubernetes.io/job-name", "x"}} }, "reserved"},
		{"queue label as --label", func(s *Spec) { s.Labels = []KeyValue{{QueueLabel, "team-a"}} }, "use --queue NAME"},
		{"bad queue", func(s *Spec) { s.Queue = "Team_A" }, `invalid --queue "Team_A"`},
		{"long queue", func(s *Spec) { s.Queue = strings.Repeat("q", 64) }, `invalid --queue`},
		{"bad selector key", func(s *Spec) { s.NodeSelector = []KeyValue{{"a/b/c", "x"}} }, `invalid --node-selector key "a/b/c"`},
		{"bad selector value", func(s *Spec) { s.NodeSelector = []KeyValue{{"gpu", "H100 80GB"}} }, "invalid --node-selector value"},
		{"bad annotation key", func(s *Spec) { s.Annotations = []KeyValue{{"no spaces", "x"}} }, `invalid --annotation key "no spaces"`},
		{"reserved annotation", func(s *Spec) { s.Annotations = []KeyValue{{SubmittingAnnotation, "x"}} }, `invalid --annotation "kubectl-tao.dev/submitting": the key is reserved`},
		{"bad cpu", func(s *Spec) { s.CPU = "lots" }, `invalid --cpu "lots"`},
		{"zero cpu", func(s *Spec) { s.CPU = "0" }, `invalid --cpu "0"`},
		{"negative memory", func(s *Spec) { s.Memory = "-1Gi" }, `invalid --memory "-1Gi"`},
		{"bad shm", func(s *Spec) { s.ShmSize = "16GB!" }, `invalid --shm-size "16GB!"`},
		{"shm above memory", func(s *Spec) { s.ShmSize, s.Memory = "32Gi", "16Gi" }, "/dev/shm counts toward the memory limit"},
		{"default multi-node shm above memory", func(s *Spec) { s.Nodes, s.Memory = 2, "8Gi" }, "--shm-size 16Gi must be less than --memory 8Gi"},
		{"short deadline", func(s *Spec) { d := time.Millisecond; s.Deadline = &d }, "invalid --deadline"},
		{"bad priority class", func(s *Spec) { s.PriorityClass = "High_Prio" }, `invalid --priority-class "High_Prio"`},
		{"bad service account", func(s *Spec) { s.ServiceAccount = "-sa" }, `invalid --service-account "-sa"`},
		{"resource without domain", func(s *Spec) { s.Resources = []KeyValue{{"hugepages", "1"}} }, "extended resources have a domain"},
		{"resource that has its own flag", func(s *Spec) { s.Resources = []KeyValue{{"nvidia.com/gpu", "1"}} }, "use --cpu, --memory or --gpus"},
		{"gpu resource of another vendor", func(s *Spec) { s.GPUResourceName = "amd.com/gpu" }, `invalid --gpu-resource "amd.com/gpu": must be a GPU resource of NVIDIA's device plugin`},
		{"nvidia resource that is no gpu", func(s *Spec) { s.GPUResourceName = "nvidia.com/hostdev" }, `invalid --gpu-resource "nvidia.com/hostdev"`},
		{"gpu resource without domain", func(s *Spec) { s.GPUResourceName = "gpu" }, `invalid --gpu-resource "gpu"`},
		{"mig without profile", func(s *Spec) { s.GPUResourceName = "nvidia.com/mig-" }, `invalid --gpu-resource "nvidia.com/mig-"`},
		{"mig profile with a space", func(s *Spec) { s.GPUResourceName = "nvidia.com/mig-1g 10gb" }, `invalid --gpu-resource "nvidia.com/mig-1g 10gb"`},
		{"gpu resource without gpus", func(s *Spec) { s.GPUs, s.GPUResourceName = 0, "nvidia.com/mig-1g.10gb" }, "--gpu-resource nvidia.com/mig-1g.10gb needs --gpus of 1 or more"},
		{"gpu resource also as --resource", func(s *Spec) {
			s.GPUResourceName, s.Resources = "nvidia.com/mig-1g.10gb", []KeyValue{{"nvidia.com/mig-1g.10gb", "1"}}
		}, `invalid --resource "nvidia.com/mig-1g.10gb": use --cpu, --memory or --gpus`},
		{"whole gpus beside another gpu resource", func(s *Spec) {
			s.GPUResourceName, s.Resources = "nvidia.com/gpu.shared", []KeyValue{{"nvidia.com/gpu", "1"}}
		}, "a job counts one GPU resource, --gpu-resource nvidia.com/gpu.shared"},
		{"gpu resource annotation", func(s *Spec) { s.Annotations = []KeyValue{{GPUResourceAnnotation, "nvidia.com/mig-1g.10gb"}} }, "use --gpu-resource NAME"},
		{"fractional extended resource", func(s *Spec) { s.Resources = []KeyValue{{"rdma/ib", "500m"}} }, "whole number above 0"},
		{"bad resource quantity", func(s *Spec) { s.Resources = []KeyValue{{"rdma/ib", "x"}} }, `invalid --resource rdma/ib "x"`},
		// Found by FuzzSpec: an empty value passed Validate and Build panicked on it.
		{"empty extended resource", func(s *Spec) { s.Resources = []KeyValue{{"rdma/ib", ""}} }, "whole number above 0"},
		{"one rank per node on one node", func(s *Spec) { s.OneRankPerNode = true }, "--one-rank-per-node needs --nodes"},
		{"volume relative path", func(s *Spec) { s.Volumes = []Volume{{Claim: "data", MountPath: "data"}} }, `invalid --volume path "data": must be absolute`},
		{"file path not UTF-8", func(s *Spec) { s.Files = []File{{Source: "f", ContainerPath: "/\xef", Data: []byte("x")}} }, `invalid --file path "/\xef": not valid UTF-8`},
		{"volume with ..", func(s *Spec) { s.Volumes = []Volume{{Claim: "data", MountPath: "/data/../etc"}} }, `must not contain ".."`},
		{"volume over /", func(s *Spec) { s.Volumes = []Volume{{Claim: "data", MountPath: "/"}} }, "cannot mount over /"},
		{"volume bad claim", func(s *Spec) { s.Volumes = []Volume{{Claim: "My_Claim", MountPath: "/data"}} }, `invalid --volume claim "My_Claim"`},
		{"two mounts one path", func(s *Spec) {
			s.Volumes = []Volume{{Claim: "a", MountPath: "/data"}, {Claim: "b", MountPath: "/data/"}}
		}, "already mounted by --volume"},
		{"file over shm", func(s *Spec) { s.Files = []File{{ContainerPath: "/dev/shm", Data: []byte("x")}} }, "/dev/shm is set with --shm-size"},
		{"file relative", func(s *Spec) { s.Files = []File{{ContainerPath: "spec.yaml", Data: []byte("x")}} }, `invalid --file path "spec.yaml"`},
		{"files share a key", func(s *Spec) {
			s.Files = []File{{ContainerPath: "/a/spec.yaml"}, {ContainerPath: "/b/spec.yaml"}}
		}, `would share the ConfigMap key "spec.yaml"`},
		{"long file names cut to one key", func(s *Spec) {
			s.Files = []File{{ContainerPath: "/a/" + strings.Repeat("x", 253) + "1"}, {ContainerPath: "/a/" + strings.Repeat("x", 253) + "2"}}
		}, `would share the ConfigMap key "` + strings.Repeat("x", 253) + `"`},
		{"files too big", func(s *Spec) {
			s.Files = []File{{ContainerPath: "/a", Data: make([]byte, 600<<10)}, {ContainerPath: "/b", Data: make([]byte, 600<<10)}}
		}, "more than the 1048576 a ConfigMap can hold"},
		{"negative retries", func(s *Spec) { s.Retries = -1 }, "invalid --retries -1: must be between 0 and 20"},
		{"too many retries", func(s *Spec) { s.Retries = MaxRetries + 1 }, "invalid --retries 21"},
		{"absurd retries", func(s *Spec) { s.Retries = 1 << 40 }, "invalid --retries 1099511627776"},
		{"huge annotations", func(s *Spec) { s.Annotations = []KeyValue{{"a", strings.Repeat("x", 300*1024)}} }, "256 KiB"},
	}
	if len(tests) < 25 {
		t.Fatalf("only %d bad inputs; the issue asks for at least 25", len(tests))
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			tc.mutate(&s)
			err := s.Validate()
			if err == nil {
				t.Fatalf("Validate() = nil, want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseToleration(t *testing.T) {
	for in, want := range map[string]corev1.Toleration{
		"nvidia.com/gpu:NoSchedule": {Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		"dedicated=ml:NoExecute":    {Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "ml", Effect: corev1.TaintEffectNoExecute},
		"spot:":                     {Key: "spot", Operator: corev1.TolerationOpExists},
	} {
		got, err := ParseToleration(in)
		if err != nil {
			t.Errorf("ParseToleration(%q): %v", in, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ParseToleration(%q) mismatch (-want +got):\n%s", in, diff)
		}
	}
	for in, want := range map[string]string{
		"nvidia.com/gpu":         "expected KEY[=VALUE]:EFFECT",
		"gpu:NoScheduel":         `unknown effect "NoScheduel"`,
		"bad key!:NoSchedule":    `invalid key "bad key!"`,
		"k=bad value:NoSchedule": `invalid value "bad value"`,
		"=v:NoSchedule":          `invalid key ""`,
	} {
		got, err := ParseToleration(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseToleration(%q) = %v, want %q", in, err, want)
		}
		// Found by FuzzParseToleration: a refusal used to return the effect it had read.
		if got != (corev1.Toleration{}) {
			t.Errorf("ParseToleration(%q) refused it but returned %+v", in, got)
		}
	}
}

func TestParseVolumeAndFile(t *testing.T) {
	for in, want := range map[string]Volume{
		"results:/results": {Claim: "results", MountPath: "/results"},
		"data:/data:ro":    {Claim: "data", MountPath: "/data", ReadOnly: true},
		"data:/data:rw":    {Claim: "data", MountPath: "/data"},
	} {
		if got, err := ParseVolume(in); err != nil || got != want {
			t.Errorf("ParseVolume(%q) = %+v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"data", "data:/d:rx", "a:b:c:d"} {
		if _, err := ParseVolume(bad); err == nil || !strings.Contains(err.Error(), "CLAIM:MOUNT_PATH") {
			t.Errorf("ParseVolume(%q) = %v", bad, err)
		}
	}
	if l, c, err := ParseFileFlag(`C:\specs\t.yaml:/specs/t.yaml`); err != nil || l != `C:\specs\t.yaml` || c != "/specs/t.yaml" {
		t.Errorf("ParseFileFlag(windows path) = %q, %q, %v", l, c, err)
	}
	for _, bad := range []string{"spec.yaml", ":/specs/x", "spec.yaml:"} {
		if _, _, err := ParseFileFlag(bad); err == nil || !strings.Contains(err.Error(), "LOCAL_PATH:CONTAINER_PATH") {
			t.Errorf("ParseFileFlag(%q) = %v", bad, err)
		}
	}
	for in, want := range map[string]string{
		"/opt/model weights (v2).bin": "model_weights_v2_.bin",
		// Found by FuzzParseFileFlag: the API server refuses ConfigMap keys starting with "..".
		"/specs/..data": "_..data",
		"/specs/...":    "_...",
		// Found by FuzzParseFileFlag: a file name may have 255 bytes, a key 253.
		"/specs/" + strings.Repeat("a", 255):   strings.Repeat("a", 253),
		"/specs/.." + strings.Repeat("b", 253): "_.." + strings.Repeat("b", 250),
	} {
		if k := fileKey(in); k != want {
			t.Errorf("fileKey(%q) = %q, want %q", in, k, want)
		}
	}
}

func TestGPUToleration(t *testing.T) {
	s := validSpec()
	if got := s.tolerations(); len(got) != 1 || got[0] != GPUToleration {
		t.Errorf("GPU pod tolerations = %v, want the nvidia.com/gpu taint's", got)
	}
	s.NoGPUToleration = true
	if got := s.tolerations(); len(got) != 0 {
		t.Errorf("--no-gpu-toleration kept %v", got)
	}
	s = validSpec()
	s.GPUs = 0
	if got := s.tolerations(); len(got) != 0 {
		t.Errorf("CPU-only pod tolerates %v", got)
	}
	s = validSpec()
	s.Tolerations = []corev1.Toleration{{Key: string(GPUResource), Operator: corev1.TolerationOpExists}}
	if got := s.tolerations(); len(got) != 1 {
		t.Errorf("user's own nvidia.com/gpu toleration duplicated: %v", got)
	}
}

func TestGPUTolerationOfOtherGPUResources(t *testing.T) {
	// MIG and shared GPU nodes carry the same nvidia.com/gpu taint as whole-GPU nodes.
	for _, name := range []corev1.ResourceName{"nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared"} {
		s := validSpec()
		s.GPUResourceName = name
		if got := s.tolerations(); len(got) != 1 || got[0] != GPUToleration {
			t.Errorf("--gpu-resource %s: tolerations = %v, want the nvidia.com/gpu taint's", name, got)
		}
	}
}

func TestIsGPUResource(t *testing.T) {
	for name, want := range map[corev1.ResourceName]bool{
		"nvidia.com/gpu":                true,
		"nvidia.com/gpu.shared":         true,
		"nvidia.com/mig-1g.10gb":        true,
		"nvidia.com/mig-3g.40gb":        true,
		"nvidia.com/mig-1g.10gb.shared": true,
		"nvidia.com/mig-":               false,
		"nvidia.com/mig-1g.10gb-":       false,
		"nvidia.com/gpu.product":        false,
		"nvidia.com/hostdev":            false,
		"amd.com/gpu":                   false,
		"rdma/ib":                       false,
		"cpu":                           false,
		"":                              false,
	} {
		if got := IsGPUResource(name); got != want {
			t.Errorf("IsGPUResource(%q) = %v, want %v", name, got, want)
		}
	}
}

// A shared resource is one time-slicing renamed, a MIG resource one of a profile's slices;
// neither word matches a name that is no GPU resource.
func TestSharedAndMIGResources(t *testing.T) {
	for name, want := range map[corev1.ResourceName][2]bool{
		"nvidia.com/gpu":                {false, false},
		"nvidia.com/gpu.shared":         {true, false},
		"nvidia.com/mig-1g.10gb":        {false, true},
		"nvidia.com/mig-1g.10gb.shared": {true, true},
		"nvidia.com/hostdev.shared":     {false, false},
		"nvidia.com/mig-":               {false, false},
		"":                              {false, false},
	} {
		if got := [2]bool{IsSharedGPUResource(name), IsMIGResource(name)}; got != want {
			t.Errorf("%q: shared, MIG = %v, want %v", name, got, want)
		}
	}
}

func TestGPUResourceOf(t *testing.T) {
	for name, tc := range map[string]struct {
		spec Spec
		want corev1.ResourceName
	}{
		"whole gpus":             {validSpec(), GPUResource},
		"whole gpus named":       {func() Spec { s := validSpec(); s.GPUResourceName = GPUResource; return s }(), GPUResource},
		"mig slices":             {func() Spec { s := validSpec(); s.GPUResourceName = "nvidia.com/mig-1g.10gb"; return s }(), "nvidia.com/mig-1g.10gb"},
		"no gpus, default named": {func() Spec { s := validSpec(); s.GPUs = 0; return s }(), GPUResource},
	} {
		t.Run(name, func(t *testing.T) {
			job := Build(tc.spec).Job
			if got := GPUResourceOf(job); got != tc.want {
				t.Errorf("GPUResourceOf = %q, want %q", got, tc.want)
			}
			// Only a resource other than whole GPUs is written down: a Job without the
			// annotation reads as whole GPUs, as every Job before the flag does.
			_, annotated := job.Annotations[GPUResourceAnnotation]
			if annotated != (tc.want != GPUResource) {
				t.Errorf("annotation %s set = %v, for %s", GPUResourceAnnotation, annotated, tc.want)
			}
			if q := job.Spec.Template.Spec.Containers[0].Resources.Limits[tc.want]; q.Value() != int64(tc.spec.GPUs) {
				t.Errorf("limit of %s = %s, want %d", tc.want, q.String(), tc.spec.GPUs)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	s := validSpec()
	s.Image, s.GPUs, s.Nodes = "", -1, 0
	err := s.Validate()
	for _, want := range []string{"--image", "--gpus", "--nodes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %s", err, want)
		}
	}
}

func TestParseKeyValues(t *testing.T) {
	got, err := ParseKeyValues("env", []string{"A=1", "B=x=y", "C="})
	if err != nil {
		t.Fatal(err)
	}
	want := []KeyValue{{"A", "1"}, {"B", "x=y"}, {"C", ""}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("got[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	for _, bad := range []struct{ in, want string }{
		{"NOEQUALS", `--env "NOEQUALS": expected KEY=VALUE`},
		{"=value", `--env "=value": the key is empty`},
	} {
		if _, err := ParseKeyValues("env", []string{bad.in}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseKeyValues(%q) = %v, want %q", bad.in, err, bad.want)
		}
	}
	if _, err := ParseKeyValues("label", []string{"a=1", "a=2"}); err == nil || !strings.Contains(err.Error(), "more than once") {
		t.Errorf("duplicate key: got %v", err)
	}
}
