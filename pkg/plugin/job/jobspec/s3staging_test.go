package jobspec

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/storage/s3layout"
)

// With staging the container's entrypoint is the supervisor, installed by the init container,
// and the user's command follows "--" as it would run alone: an argv untouched (escaped against
// the kubelet), a string under bash. The log archive is on where there are results to keep it
// with. UserCommand gives the command back.
func TestStagedContainerCommand(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mutate  func(*Spec)
		command []string
		want    []string
	}{
		{"argv, outputs", nil, []string{"python", "train.py", "--lr=$(LR)"},
			[]string{s3layout.StagerBinary, "stage", "run", "--", "python", "train.py", "--lr=$$(LR)"}},
		{"bash string", nil, []string{"python train.py"},
			[]string{s3layout.StagerBinary, "stage", "run", "--", Shell, "-c", "python train.py"}},
		{"--no-log-archive", func(s *Spec) { s.Staging.NoLogArchive = true }, []string{"python", "train.py"},
			[]string{s3layout.StagerBinary, "stage", "run", "--no-log-archive", "--", "python", "train.py"}},
		{"inputs only: no archive", func(s *Spec) { s.Staging.Outputs = nil }, []string{"python", "train.py"},
			[]string{s3layout.StagerBinary, "stage", "run", "--no-log-archive", "--", "python", "train.py"}},
		{"checkpoints only: archived", func(s *Spec) {
			s.Staging.Outputs, s.Staging.Inputs = nil, nil
			s.Staging.Checkpoints = &Checkpoints{Dir: "/ckpt", Keep: 2}
		}, []string{"python", "train.py"},
			[]string{s3layout.StagerBinary, "stage", "run", "--", "python", "train.py"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := stagedSpec()
			if tc.mutate != nil {
				tc.mutate(&s)
			}
			s.Command = tc.command
			got := ContainerCommand(s)
			if strings.Join(got, "\x00") != strings.Join(tc.want, "\x00") {
				t.Errorf("ContainerCommand = %q, want %q", got, tc.want)
			}
			if c := Build(s).Job.Spec.Template.Spec.Containers[0]; strings.Join(c.Command, "\x00") != strings.Join(got, "\x00") {
				t.Errorf("the container runs %q", c.Command)
			}
			back, bash := UserCommand(got, nil)
			if strings.Join(back, "\x00") != strings.Join(tc.command, "\x00") || bash != (len(tc.command) == 1) {
				t.Errorf("UserCommand = %q, %v; want %q", back, bash, tc.command)
			}
		})
	}
	// Jobs made by older versions ran a bash wrapper: their command is still read back.
	legacy := []string{"/bin/bash", "-c", "SCRIPT", "kubectl-tao", "python", "train.py"}
	if back, bash := UserCommand(legacy, nil); strings.Join(back, " ") != "python train.py" || bash {
		t.Errorf("UserCommand of the bash wrapper = %q, %v", back, bash)
	}
}

// checkpointsAndWorkdir gives a spec --checkpoint-dir dir and --workdir with --workdir-mount mount.
func checkpointsAndWorkdir(dir, mount string) func(*Spec) {
	return func(s *Spec) {
		s.Staging.Checkpoints = &Checkpoints{Dir: dir, Keep: 2}
		s.Workdir = &Workdir{MountPath: mount, SHA256: testWorkdirSum, StagerImage: s.Staging.StagerImage}
	}
}

func TestStagingValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate  func(*Spec)
		wantErr string
	}{
		"valid":            {func(*Spec) {}, ""},
		"existing secret":  {func(s *Spec) { s.Staging.Credentials, s.Staging.ExistingSecret = nil, "team-s3" }, ""},
		"bad secret name":  {func(s *Spec) { s.Staging.Credentials, s.Staging.ExistingSecret = nil, "Team_S3" }, `invalid --s3-secret "Team_S3"`},
		"nothing to stage": {func(s *Spec) { s.Staging.Inputs, s.Staging.Outputs = nil, nil }, "at least one --input, --output-path or --checkpoint-dir"},
		"checkpoints only": {func(s *Spec) {
			s.Staging.Inputs, s.Staging.Outputs, s.Staging.Checkpoints = nil, nil, &Checkpoints{Dir: "/ckpt", Keep: 1}
		}, ""},
		"checkpoints in outputs ok": {func(s *Spec) { s.Staging.Checkpoints = &Checkpoints{Dir: "/results/train", Keep: 2} }, ""},
		"relative checkpoint dir":   {func(s *Spec) { s.Staging.Checkpoints = &Checkpoints{Dir: "ckpt", Keep: 2} }, "--checkpoint-dir: "},
		"checkpoint dir root":       {func(s *Spec) { s.Staging.Checkpoints = &Checkpoints{Dir: "/", Keep: 2} }, "--checkpoint-dir: "},
		"checkpoint keep 0":         {func(s *Spec) { s.Staging.Checkpoints = &Checkpoints{Dir: "/ckpt", Keep: 0} }, "invalid --checkpoint-keep 0"},
		"checkpoint no pattern":     {func(s *Spec) { s.Staging.Checkpoints = &Checkpoints{Dir: "/ckpt", Keep: 2, Patterns: []string{}} }, "--checkpoint-pattern: no pattern"},
		"checkpoint pattern slash": {func(s *Spec) {
			s.Staging.Checkpoints = &Checkpoints{Dir: "/ckpt", Keep: 2, Patterns: []string{"a/*.pt"}}
		}, `--checkpoint-pattern "a/*.pt"`},
		"checkpoint pattern bad": {func(s *Spec) { s.Staging.Checkpoints = &Checkpoints{Dir: "/ckpt", Keep: 2, Patterns: []string{"[x"}} }, `--checkpoint-pattern "[x"`},
		"checkpoints on input": {func(s *Spec) { s.Staging.Checkpoints = &Checkpoints{Dir: "/data", Keep: 2} },
			"--checkpoint-dir /data and --input /data/train overlap"},
		"checkpoints on stager": {func(s *Spec) { s.Staging.Checkpoints = &Checkpoints{Dir: "/tao-stager", Keep: 2} }, "reserved for the stager binary"},
		"checkpoints on file": {func(s *Spec) {
			s.Staging.Checkpoints = &Checkpoints{Dir: "/specs", Keep: 2}
			s.Staging.Inputs = s.Staging.Inputs[:1]
			s.Files = []File{{Source: "t.yaml", ContainerPath: "/specs/train.yaml", Data: []byte("x")}}
		}, "--checkpoint-dir /specs overlaps --file /specs/train.yaml"},
		"checkpoints in the workdir": {checkpointsAndWorkdir("/workspace/ckpt", DefaultWorkdirMount),
			"--checkpoint-dir /workspace/ckpt and --workdir-mount /workspace overlap"},
		"workdir in the checkpoints":        {checkpointsAndWorkdir("/w", "/w/code/"), "--checkpoint-dir /w and --workdir-mount /w/code overlap"},
		"checkpoints beside the workdir ok": {checkpointsAndWorkdir("/workspace-ckpt", DefaultWorkdirMount), ""},
		"checkpoints on volume": {func(s *Spec) {
			s.Staging.Checkpoints = &Checkpoints{Dir: "/pvc/ckpt", Keep: 2}
			s.Volumes = []Volume{{Claim: "ckpts", MountPath: "/pvc"}}
		}, ""},
		"resume from S3 onto a volume": {func(s *Spec) {
			s.Staging.Checkpoints = &Checkpoints{Dir: "/pvc/ckpt", Keep: 2, FromJob: "old", FromUID: "uid-1"}
			s.Volumes = []Volume{{Claim: "ckpts", MountPath: "/pvc"}}
		}, "copy the old run's checkpoints onto the volume instead"},
		"no S3 with outputs": {func(s *Spec) {
			s.Staging.Checkpoints, s.Staging.NoS3, s.Staging.Credentials = &Checkpoints{Dir: "/pvc/ckpt", Keep: 2}, true, nil
			s.Volumes = []Volume{{Claim: "ckpts", MountPath: "/pvc"}}
		}, "internal error: staging without S3"},
		"checkpoints on ro volume": {func(s *Spec) {
			s.Staging.Checkpoints = &Checkpoints{Dir: "/pvc/ckpt", Keep: 2}
			s.Volumes = []Volume{{Claim: "ckpts", MountPath: "/pvc", ReadOnly: true}}
		}, "read-only --volume ckpts:/pvc"},
		"volume in checkpoints": {func(s *Spec) {
			s.Staging.Checkpoints = &Checkpoints{Dir: "/ckpt", Keep: 2}
			s.Volumes = []Volume{{Claim: "ckpts", MountPath: "/ckpt/shared"}}
		}, "holds the mount of --volume ckpts:/ckpt/shared"},
		"checkpoint env": {func(s *Spec) {
			s.Staging.Checkpoints = &Checkpoints{Dir: "/ckpt", Keep: 2}
			s.Env = []KeyValue{{"TAO_RESUME_CHECKPOINT", "x"}}
		}, `invalid --env "TAO_RESUME_CHECKPOINT": --checkpoint-dir sets it`},
		"grace 0":           {func(s *Spec) { g := time.Duration(0); s.TerminationGracePeriod = &g }, "invalid --termination-grace-period 0s: at least 1s"},
		"grace fraction":    {func(s *Spec) { g := 1500 * time.Millisecond; s.TerminationGracePeriod = &g }, "whole number of seconds"},
		"no image":          {func(s *Spec) { s.Staging.StagerImage = "" }, "--stager-image is empty"},
		"duplicate input":   {func(s *Spec) { s.Staging.Inputs = append(s.Staging.Inputs, s.Staging.Inputs[0]) }, "--input /data/train: the path is given more than once"},
		"nested inputs":     {func(s *Spec) { s.Staging.Inputs[1].Path = "/data/train/x" }, "are nested"},
		"sibling inputs ok": {func(s *Spec) { s.Staging.Inputs[1].Path = "/data/training" }, ""},
		"duplicate output":  {func(s *Spec) { s.Staging.Outputs = []string{"/r", "/r"} }, "--output-path /r: the path is given more than once"},
		"nested outputs":    {func(s *Spec) { s.Staging.Outputs = []string{"/r/a", "/r"} }, "are nested"},
		"relative output":   {func(s *Spec) { s.Staging.Outputs = []string{"results"} }, "must be absolute"},
		"stager dir":        {func(s *Spec) { s.Staging.Outputs = []string{"/tao-stager/x"} }, "reserved for the stager binary"},
		"volume on stager":  {func(s *Spec) { s.Volumes = []Volume{{Claim: "c", MountPath: "/tao-stager"}} }, "reserved for the stager binary"},
		"input on file": {func(s *Spec) {
			s.Files = []File{{Source: "t.yaml", ContainerPath: "/specs/train.yaml", Data: []byte("x")}}
		}, "overlaps --file /specs/train.yaml"},
		"input on ro volume":  {func(s *Spec) { s.Volumes = []Volume{{Claim: "ds", MountPath: "/data", ReadOnly: true}} }, "read-only --volume ds:/data"},
		"output on volume ok": {func(s *Spec) { s.Volumes = []Volume{{Claim: "results", MountPath: "/results"}} }, ""},
		"reserved env":        {func(s *Spec) { s.Env = []KeyValue{{"ACCESS_KEY", "x"}} }, `invalid --env "ACCESS_KEY": S3 staging sets it`},
		"job id env":          {func(s *Spec) { s.Env = []KeyValue{{"TAO_JOB_ID", "x"}} }, `invalid --env "TAO_JOB_ID"`},
		"reserved annotation": {func(s *Spec) { s.Annotations = []KeyValue{{s3layout.AnnotationOutputs, "[]"}} }, "reserved for kubectl-tao"},
		"missing credentials": {func(s *Spec) {
			s.Staging.Credentials = map[string]string{s3layout.EnvBucket: "results-bucket"}
		}, "S3 staging needs ACCESS_KEY, SECRET_KEY in the submitting shell"},
		"bad bucket":   {func(s *Spec) { s.Staging.Credentials[s3layout.EnvBucket] = "Bad_Bucket" }, "S3_BUCKET_NAME in the submitting shell"},
		"bad endpoint": {func(s *Spec) { s.Staging.Credentials[s3layout.EnvEndpoint] = "s3.example.com" }, "S3_ENDPOINT_URL must be an http:// or https:// URL"},
		"endpoint with password": {func(s *Spec) {
			s.Staging.Credentials[s3layout.EnvEndpoint] = "https://u:pw@s3.example.com"
		}, "must not carry a user or password"},
		// Found by FuzzParseEndpoint: submit took it, and the stager in the pod refused it.
		"endpoint with a path": {func(s *Spec) {
			s.Staging.Credentials[s3layout.EnvEndpoint] = "https://s3.example.com/bucket"
		}, "without a path, query or fragment"},
		"endpoint with an escaped host": {func(s *Spec) {
			s.Staging.Credentials[s3layout.EnvEndpoint] = "https://%250"
		}, "the host may not hold a %-escape"},
		"key on two lines": {func(s *Spec) { s.Staging.Credentials[s3layout.EnvSecretKey] = testSecretKey + "\n" }, "SECRET_KEY in the submitting shell spans several lines"},
	} {
		s := stagedSpec()
		tc.mutate(&s)
		err := s.Validate()
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.wantErr)
			continue
		}
		if strings.Contains(err.Error(), testSecretKey) || strings.Contains(err.Error(), testAccessKey) {
			t.Errorf("%s: the error quotes a credential: %v", name, err)
		}
	}
	// Every Job carries TAO_JOB_ID and TAO_JOB_UID, staged or not.
	s := validSpec()
	s.Env = []KeyValue{{"TAO_JOB_UID", "x"}}
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "sets it to the Job's name and UID") {
		t.Errorf("--env TAO_JOB_UID on an unstaged job: %v", err)
	}
}

// The contract on the objects rather than on the golden text.
func TestStagingContract(t *testing.T) {
	s := stagedSpec()
	objs := Build(s)
	pod := objs.Job.Spec.Template.Spec
	if len(pod.InitContainers) != 1 {
		t.Fatalf("init containers = %d", len(pod.InitContainers))
	}
	init := pod.InitContainers[0]
	if init.Name != s3layout.StagerContainer || init.Image != s.Staging.StagerImage ||
		strings.Join(init.Command, " ") != s3layout.StagerImageBinary+" stage install "+s3layout.StagerDir {
		t.Errorf("init container = %+v", init)
	}
	if len(objs.Children) != 1 {
		t.Fatalf("children = %d, want the Secret", len(objs.Children))
	}
	secret := objs.Children[0].(*corev1.Secret)
	if secret.Name != "train-s3" || string(secret.Data[s3layout.EnvSecretKey]) != testSecretKey || !*secret.Immutable {
		t.Errorf("secret = %+v", secret)
	}
	c := pod.Containers[0]
	seen := map[string]bool{}
	for _, e := range c.Env {
		seen[e.Name] = true
		for _, v := range []string{testAccessKey, testSecretKey, "results-bucket"} {
			if strings.Contains(e.Value, v) {
				t.Errorf("env %s carries a credential as a plain value", e.Name)
			}
		}
		switch e.Name {
		case s3layout.EnvAccessKey, s3layout.EnvSecretKey, s3layout.EnvBucket, s3layout.EnvEndpoint:
			ref := e.ValueFrom.SecretKeyRef
			if ref == nil || ref.Name != "train-s3" || ref.Key != e.Name || (e.Name == s3layout.EnvEndpoint) != (ref.Optional != nil && *ref.Optional) {
				t.Errorf("env %s = %+v, want a secretKeyRef to train-s3 (optional only for the endpoint)", e.Name, e.ValueFrom)
			}
		case s3layout.EnvJobUID:
			if e.ValueFrom.FieldRef.FieldPath != "metadata.labels['batch.kubernetes.io/controller-uid']" {
				t.Errorf("TAO_JOB_UID = %+v", e.ValueFrom)
			}
		}
	}
	for _, want := range append([]string{EnvStager, s3layout.EnvJobID, s3layout.EnvJobUID, s3layout.EnvInputs, s3layout.EnvOutputs}, s3layout.CredentialKeys...) {
		if !seen[want] {
			t.Errorf("env %s missing", want)
		}
	}
	for _, a := range c.Command {
		for _, v := range []string{testAccessKey, testSecretKey} {
			if strings.Contains(a, v) {
				t.Error("a credential is on the command line")
			}
		}
	}
	if objs.Job.Annotations[s3layout.AnnotationOutputs] != `["/results"]` || objs.Job.Annotations[s3layout.AnnotationS3Secret] != "train-s3" {
		t.Errorf("annotations = %v", objs.Job.Annotations)
	}
	if _, ok := pod.Containers[0].Resources.Limits[GPUResource]; !ok {
		t.Error("main container lost its GPU limit")
	}
	if _, ok := init.Resources.Limits[GPUResource]; ok {
		t.Error("the init container asks for GPUs")
	}
	ex := stagedSpec()
	ex.Staging.Credentials, ex.Staging.ExistingSecret = nil, "team-s3"
	if objs := Build(ex); len(objs.Children) != 0 || objs.Job.Annotations[s3layout.AnnotationS3Secret] != "team-s3" {
		t.Errorf("--s3-secret: children %d, annotations %v; want the Secret referenced, not created", len(objs.Children), objs.Job.Annotations)
	}
}
