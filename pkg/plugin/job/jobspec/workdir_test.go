package jobspec

import (
	"strings"
	"testing"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

const testWorkdirSum = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func workdirSpec() Spec {
	s := validSpec()
	s.Name, s.Nodes, s.CPU, s.Memory = "ddp", 2, "4", "64Gi"
	s.Command = []string{"bash run.sh"}
	s.Workdir = &Workdir{MountPath: DefaultWorkdirMount, SHA256: testWorkdirSum, Archive: []byte{0x28, 0xb5, 0x2f, 0xfd}, StagerImage: "ghcr.io/kubectl-tao/kubectl-tao:v1.2.3"}
	return s
}

// The invariants, on the objects: every rank unpacks before the command and runs in the
// snapshot; the archive is either in an owned ConfigMap or fetched from S3, never both.
func TestBuildWorkdirContract(t *testing.T) {
	objs := Build(workdirSpec())
	pod := objs.Job.Spec.Template.Spec
	main := pod.Containers[0]
	if main.WorkingDir != "/workspace" || objs.Job.Annotations[s3layout.AnnotationWorkdirSHA256] != testWorkdirSum {
		t.Errorf("workingDir %q, annotations %v", main.WorkingDir, objs.Job.Annotations)
	}
	found := false
	for _, e := range main.Env {
		found = found || e.Name == s3layout.EnvWorkdirSHA256 && e.Value == testWorkdirSum
	}
	if !found {
		t.Errorf("main container lacks %s: %v", s3layout.EnvWorkdirSHA256, main.Env)
	}
	if len(pod.InitContainers) != 1 || pod.InitContainers[0].Name != WorkdirContainer {
		t.Fatalf("init containers %v", pod.InitContainers)
	}
	if _, gpu := pod.InitContainers[0].Resources.Limits[GPUResource]; gpu {
		t.Error("the unpacker asks for GPUs")
	}
	var cms int
	for _, c := range objs.Children {
		if cm, ok := c.(interface{ GetName() string }); ok && cm.GetName() == WorkdirConfigMapName("ddp") {
			cms++
		}
	}
	if cms != 1 {
		t.Errorf("%d workdir ConfigMaps, want 1", cms)
	}
	s := stagedSpec()
	s.Workdir = &Workdir{MountPath: "/w", SHA256: testWorkdirSum, StagerImage: "img"}
	for _, c := range Build(s).Children {
		if cm, ok := c.(interface{ GetName() string }); ok && cm.GetName() == WorkdirConfigMapName(s.Name) {
			t.Error("an S3 workdir also made a ConfigMap")
		}
	}
	if got := strings.Join(Build(s).Job.Spec.Template.Spec.InitContainers[1].Command, " "); !strings.Contains(got, "--from-s3") {
		t.Errorf("S3 unpacker command %q", got)
	}
}

func TestValidateWorkdir(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*Spec)
		want   string
	}{
		"relative mount":  {func(s *Spec) { s.Workdir.MountPath = "workspace" }, "must be absolute"},
		"stager dir":      {func(s *Spec) { s.Workdir.MountPath = "/tao-stager/x" }, "reserved for kubectl-tao"},
		"volume there":    {func(s *Spec) { s.Volumes = []Volume{{Claim: "c", MountPath: "/workspace/"}} }, "already mounted by --volume c"},
		"env set":         {func(s *Spec) { s.Env = []KeyValue{{s3layout.EnvWorkdirSHA256, "x"}} }, "sets it to the --workdir archive's checksum"},
		"too big":         {func(s *Spec) { s.Workdir.Archive = make([]byte, MaxFilesBytes+1) }, "configure S3 staging"},
		"S3 without S3":   {func(s *Spec) { s.Workdir.Archive = nil }, "has no S3 staging"},
		"no stager image": {func(s *Spec) { s.Workdir.StagerImage = "" }, "--stager-image is empty"},
	} {
		t.Run(name, func(t *testing.T) {
			s := workdirSpec()
			tc.mutate(&s)
			if err := s.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}
