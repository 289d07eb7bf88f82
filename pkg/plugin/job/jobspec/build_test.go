package jobspec

import (
	"bytes"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
	"github.com/kubectl-tao/kubectl-tao/test/testutil/golden"
)

// Fake credentials: what the golden files and the leak checks look for.
const (
	testAccessKey = "AKIAGOLDENACCESS"
	testSecretKey = "golden/secret+key="
)

// stagedSpec downloads a file and a prefix, uploads a directory, with the shell's credentials.
func stagedSpec() Spec {
	s := validSpec()
	s.Command = []string{"dino train -e /specs/train.yaml results_dir=/results"}
	s.Staging = &Staging{
		Inputs: []s3layout.Input{
			{Path: "/data/train", Source: s3layout.URL{Bucket: "datasets", Key: "coco/train/"}},
			{Path: "/specs/train.yaml", Source: s3layout.URL{Bucket: "datasets", Key: "specs/$(dino).yaml"}},
		},
		Outputs:     []string{"/results"},
		StagerImage: "ghcr.io/kubectl-tao/kubectl-tao:v1.2.3",
		Credentials: map[string]string{
			s3layout.EnvAccessKey: testAccessKey, s3layout.EnvSecretKey: testSecretKey,
			s3layout.EnvBucket: "results-bucket", s3layout.EnvEndpoint: "https://s3.example.com",
		},
	}
	return s
}

func TestBuildGolden(t *testing.T) {
	ttl := 90 * time.Minute
	tests := map[string]Spec{
		"single-node": validSpec(),
		"single-node-argv": func() Spec {
			s := validSpec()
			s.Command = []string{"python", "-c", `print("$(HOME) costs $5")`}
			return s
		}(),
		"no-gpus": func() Spec { s := validSpec(); s.GPUs = 0; return s }(),
		"multi-node": func() Spec {
			s := validSpec()
			s.Name, s.Nodes = "ddp", 4
			s.Command = []string{"torchrun --nnodes $NNODES --nproc-per-node $NPROC_PER_NODE train.py"}
			return s
		}(),
		"training-grade": func() Spec {
			s := validSpec()
			deadline := 48 * time.Hour
			s.Name, s.Nodes, s.GPUs = "big", 4, 8
			s.CPU, s.Memory, s.ShmSize, s.Deadline = "90", "900Gi", "64Gi", &deadline
			s.PriorityClass, s.ServiceAccount, s.OneRankPerNode = "training-high", "trainer", true
			s.Resources = []KeyValue{{"rdma/ib", "1"}}
			s.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "ml", Effect: corev1.TaintEffectNoExecute}}
			return s
		}(),
		"volumes-and-files": func() Spec {
			s := validSpec()
			s.Name = "tao-dino"
			s.Command = []string{"dino train -e /specs/train.yaml"}
			s.Volumes = []Volume{{Claim: "results", MountPath: "/results"}, {Claim: "datasets", MountPath: "/data/", ReadOnly: true}}
			s.Files = []File{
				{Source: "train.yaml", ContainerPath: "/specs/train.yaml", Data: []byte("train:\n  epochs: 10\n")},
				{Source: "weights.bin", ContainerPath: "/opt/model weights.bin", Data: []byte{0xff, 0x00, 0xfe}},
			}
			return s
		}(),
		"retries": func() Spec { s := validSpec(); s.Retries = 3; return s }(),
		"multi-node-retries": func() Spec {
			s := validSpec()
			s.Name, s.Nodes, s.Retries = "ddp", 4, 2
			s.Command = []string{"torchrun --nnodes $NNODES --nproc-per-node $NPROC_PER_NODE train.py"}
			return s
		}(),
		"elastic": func() Spec {
			s := validSpec()
			s.Name, s.Nodes, s.NodesMin, s.NodesMax, s.Retries = "ddp", 2, 1, 3, DefaultElasticRetries
			s.Staging = &Staging{StagerImage: "ghcr.io/kubectl-tao/kubectl-tao:v1.2.3", NoS3: true, NoLogArchive: true}
			s.Command = []string{"torchrun", "train.py"}
			return s
		}(),
		"staged": func() Spec {
			s := stagedSpec()
			s.CPU, s.Memory = "8", "64Gi"
			return s
		}(),
		"staged-multi-node-s3-secret": func() Spec {
			s := stagedSpec()
			s.Name, s.Nodes = "ddp", 2
			s.Command = []string{"torchrun", "train.py", "--out", "$(HOME)"}
			s.Staging.Inputs = nil
			s.Staging.Credentials, s.Staging.ExistingSecret = nil, "team-s3"
			return s
		}(),
		"staged-inputs-only": func() Spec {
			s := stagedSpec()
			s.Staging.Outputs = nil
			return s
		}(),
		"checkpoints": func() Spec {
			s := stagedSpec()
			s.Command = []string{"python", "train.py", "--resume", "$TAO_RESUME_CHECKPOINT"}
			s.Staging.Inputs, s.Staging.Outputs = nil, nil
			s.Staging.Checkpoints = &Checkpoints{Dir: "/ckpt", Keep: 2}
			return s
		}(),
		"checkpoints-multi-node-outputs": func() Spec {
			s := stagedSpec()
			grace := 5 * time.Minute
			s.Name, s.Nodes, s.Retries, s.TerminationGracePeriod = "ddp", 2, 2, &grace
			s.Staging.Inputs, s.Staging.NoLogArchive = nil, true
			s.Staging.Checkpoints = &Checkpoints{Dir: "/results/ckpt", Keep: 3, Patterns: []string{"*.pt", "epoch-$(N)"}}
			return s
		}(),
		"checkpoints-on-volume": func() Spec {
			s := validSpec()
			s.Command = []string{"python train.py"}
			s.Volumes = []Volume{{Claim: "ckpts", MountPath: "/pvc"}}
			s.Staging = &Staging{StagerImage: "ghcr.io/kubectl-tao/kubectl-tao:v1.2.3", NoS3: true, Checkpoints: &Checkpoints{Dir: "/pvc/ckpt", Keep: 2}}
			return s
		}(),
		"queued": func() Spec {
			s := validSpec()
			s.Name, s.Nodes, s.Queue = "queued", 2, "team-a"
			s.Labels = []KeyValue{{"team", "vision"}}
			return s
		}(),
		// Two MIG slices per node: the limit, NPROC_PER_NODE and the annotation all say 2 of
		// the slice, and the toleration is still the nvidia.com/gpu taint's.
		"mig-multi-node": func() Spec {
			s := validSpec()
			s.Name, s.Nodes, s.GPUs, s.GPUResourceName = "mig", 2, 2, "nvidia.com/mig-1g.10gb"
			return s
		}(),
		"no-gpu-toleration": func() Spec { s := validSpec(); s.NoGPUToleration = true; s.ShmSize = "1Gi"; return s }(),
		"workdir-configmap": workdirSpec(),
		"mpi":               mpiSpec(),
		"workdir-s3": func() Spec {
			s := stagedSpec()
			s.Staging.Inputs = nil
			s.Workdir = &Workdir{MountPath: "/code/", SHA256: testWorkdirSum, StagerImage: s.Staging.StagerImage}
			return s
		}(),
		"every-flag": {
			Name: "full", Namespace: "research", Image: "pytorch/pytorch:2.9.0-cuda13.0",
			Command: []string{"python", "train.py", "--lr", "3e-4"},
			GPUs:    8, Nodes: 2, MasterPort: 23456, TTL: &ttl,
			Env:              []KeyValue{{"NCCL_SOCKET_IFNAME", "eth0"}, {"LITERAL", "$(NOT_EXPANDED) $$"}},
			EnvFromSecrets:   []string{"wandb", "hf-token"},
			ImagePullSecrets: []string{"ngc"},
			NodeSelector:     []KeyValue{{"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"}},
			Labels:           []KeyValue{{"team", "vision"}},
			Annotations:      []KeyValue{{"sim.kubectl-tao.dev/fate", "oom"}},
		},
	}
	for name, spec := range tests {
		t.Run(name, func(t *testing.T) {
			if err := spec.Validate(); err != nil {
				t.Fatalf("golden spec is invalid: %v", err)
			}
			var buf bytes.Buffer
			for _, obj := range Build(spec).All() {
				b, err := yaml.Marshal(obj)
				if err != nil {
					t.Fatal(err)
				}
				buf.WriteString("---\n")
				buf.Write(b)
			}
			golden.Check(t, name+".yaml", buf.String())
		})
	}
}

// The contract's invariants, checked on the objects rather than on the golden text, so that a
// careless -update cannot bless a broken manifest.
func TestBuildContract(t *testing.T) {
	s := validSpec()
	s.Name, s.Nodes, s.GPUs = "ddp", 3, 4
	objs := Build(s)
	job := objs.Job
	if *job.Spec.BackoffLimit != 0 || job.Spec.Template.Spec.RestartPolicy != "Never" {
		t.Errorf("backoffLimit %d, restartPolicy %s; want 0, Never", *job.Spec.BackoffLimit, job.Spec.Template.Spec.RestartPolicy)
	}
	if *job.Spec.Parallelism != 3 || *job.Spec.Completions != 3 || *job.Spec.CompletionMode != "Indexed" {
		t.Errorf("parallelism/completions/mode = %d/%d/%s", *job.Spec.Parallelism, *job.Spec.Completions, *job.Spec.CompletionMode)
	}
	if job.Spec.Template.Spec.Subdomain != "ddp" {
		t.Errorf("subdomain = %q", job.Spec.Template.Spec.Subdomain)
	}
	if job.Spec.Suspend != nil || job.Spec.TTLSecondsAfterFinished != nil {
		t.Errorf("suspend %v, ttl %v: want both unset", job.Spec.Suspend, job.Spec.TTLSecondsAfterFinished)
	}
	c := job.Spec.Template.Spec.Containers[0]
	if q := c.Resources.Limits[GPUResource]; q.Value() != 4 {
		t.Errorf("gpu limit = %s", q.String())
	}
	if len(objs.Children) != 1 {
		t.Fatalf("children = %d, want the Service", len(objs.Children))
	}
	for _, obj := range objs.All() {
		if l := obj.(interface{ GetLabels() map[string]string }).GetLabels(); l[ManagedByLabel] != ManagedByValue {
			t.Errorf("%T lacks the managed-by label: %v", obj, l)
		}
	}
	single := Build(validSpec())
	if len(single.Children) != 0 || single.Job.Spec.CompletionMode != nil || single.Job.Spec.Template.Spec.Subdomain != "" {
		t.Errorf("single-node job has multi-node parts: %+v", single.Job.Spec)
	}
	if got := single.Job.Spec.Template.Spec.Containers[0].Command; len(got) != 3 || got[0] != "/bin/bash" || got[1] != "-c" || got[2] != "python train.py" {
		t.Errorf("single-node command = %q, want the SDK's [/bin/bash -c COMMAND]", got)
	}
}

func TestUnqueued(t *testing.T) {
	s := validSpec()
	s.Queue = "team-a"
	job := Build(s).Job
	if Queued(job) != "team-a" || job.Spec.Suspend == nil || !*job.Spec.Suspend {
		t.Fatalf("built queued job: label %q, suspend %v; want team-a, true", Queued(job), job.Spec.Suspend)
	}
	u := Unqueued(job)
	if Queued(u) != "" || u.Labels[ManagedByLabel] != ManagedByValue || !*u.Spec.Suspend {
		t.Fatalf("Unqueued: labels %v, suspend %v; want no queue label, the rest kept, still suspended", u.Labels, *u.Spec.Suspend)
	}
	if Queued(job) != "team-a" {
		t.Fatal("Unqueued changed its argument")
	}
	if plain := Build(validSpec()).Job; Queued(plain) != "" || plain.Spec.Suspend != nil {
		t.Fatalf("unqueued spec: label %q, suspend %v; want none", Queued(plain), plain.Spec.Suspend)
	}
}
