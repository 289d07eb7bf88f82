package jobspec

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kubectl-tao/kubectl-tao/test/testutil/golden"
)

const testNGCKey = "nvapi-golden-ngc-key"

// The --env name rules: refused (with the fix), allowed, and the escape hatch.
func TestValidateEnvCredentialNames(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   []KeyValue
		allow []string
		want  string // "" when valid
	}{
		{"plain name", []KeyValue{{"NCCL_SOCKET_IFNAME", "eth0"}}, nil, ""},
		{"known credential", []KeyValue{{"NGC_KEY", testNGCKey}}, nil, "--env NGC_KEY: that looks like a credential"},
		{"known credential, lowercase", []KeyValue{{"hf_token", "x"}}, nil, "--env hf_token: that looks like a credential"},
		{"S3 key without staging", []KeyValue{{"SECRET_KEY", "x"}}, nil, "--env SECRET_KEY: that looks like a credential"},
		{"suffix _TOKEN", []KeyValue{{"MY_TOKEN", "x"}}, nil, "export it and pass --secret-env MY_TOKEN instead"},
		{"suffix _PASSWORD", []KeyValue{{"DB_PASSWORD", "x"}}, nil, "--env-from-secret SECRET for a Secret that already exists"},
		{"suffix _API_KEY", []KeyValue{{"OPENAI_API_KEY", "x"}}, nil, "if it is not a secret, add --env-allow OPENAI_API_KEY"},
		{"suffix _SECRET", []KeyValue{{"CLIENT_SECRET", "x"}}, nil, "--secret-env CLIENT_SECRET"},
		{"escape hatch", []KeyValue{{"MAX_NEW_TOKEN", "x"}}, []string{"MAX_NEW_TOKEN"}, ""},
		{"escape hatch names another", []KeyValue{{"MAX_NEW_TOKEN", "x"}}, []string{"OTHER_TOKEN"}, "--env MAX_NEW_TOKEN: that looks like a credential"},
		{"no escape hatch for a known credential", []KeyValue{{"NGC_KEY", testNGCKey}}, []string{"NGC_KEY"},
			"--env-allow NGC_KEY: NGC_KEY is a credential, never a plain value: use --secret-env NGC_KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			s.Env, s.EnvAllow = tc.env, tc.allow
			checkValidate(t, s, tc.want)
		})
	}
}

func TestValidateSecretEnv(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Spec)
		want   string
	}{
		{"valid", func(s *Spec) { s.SecretEnv = []KeyValue{{"NGC_KEY", testNGCKey}, {"HF_TOKEN", "hf"}} }, ""},
		{"valid with staging", func(s *Spec) { *s = stagedSpec(); s.SecretEnv = []KeyValue{{"WANDB_API_KEY", "w"}} }, ""},
		{"also --env", func(s *Spec) {
			s.Env, s.EnvAllow = []KeyValue{{"MY_TOKEN", "x"}}, []string{"MY_TOKEN"}
			s.SecretEnv = []KeyValue{{"MY_TOKEN", "y"}}
		}, "MY_TOKEN is given both as --env and as --secret-env"},
		{"twice", func(s *Spec) { s.SecretEnv = []KeyValue{{"A", "1"}, {"A", "2"}} }, "--secret-env: A is given more than once"},
		{"job identity", func(s *Spec) { s.SecretEnv = []KeyValue{{"TAO_JOB_ID", "1"}} }, `invalid --secret-env "TAO_JOB_ID": kubectl-tao sets it`},
		{"rendezvous", func(s *Spec) { s.Nodes = 2; s.SecretEnv = []KeyValue{{"MASTER_ADDR", "1"}} }, `invalid --secret-env "MASTER_ADDR": multi-node jobs set it`},
		{"staging's", func(s *Spec) { *s = stagedSpec(); s.SecretEnv = []KeyValue{{"SECRET_KEY", "1"}} }, `invalid --secret-env "SECRET_KEY": S3 staging sets it`},
		{"empty value", func(s *Spec) { s.SecretEnv = []KeyValue{{"A", ""}} }, "--secret-env A: the value is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			tc.mutate(&s)
			checkValidate(t, s, tc.want)
		})
	}
}

// checkValidate wants s valid when want is "", else an error holding want; never the value.
func checkValidate(t *testing.T, s Spec, want string) {
	t.Helper()
	err := s.Validate()
	switch {
	case want == "" && err != nil:
		t.Fatalf("Validate() = %v, want nil", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("Validate() = %v, want %q", err, want)
	case err != nil && strings.Contains(err.Error(), testNGCKey):
		t.Fatalf("the message quotes the value: %v", err)
	}
}

// --secret-env becomes one immutable Secret JOB-env and secretKeyRefs: the Job holds no value.
func TestBuildSecretEnv(t *testing.T) {
	s := validSpec()
	s.SecretEnv = []KeyValue{{"NGC_KEY", testNGCKey}, {"HF_TOKEN", "hf_golden"}}
	objs := Build(s)
	if len(objs.Children) != 1 {
		t.Fatalf("children = %d, want the env Secret", len(objs.Children))
	}
	sec, ok := objs.Children[0].(*corev1.Secret)
	if !ok || sec.Name != "train-env" || sec.Namespace != "default" || !*sec.Immutable || sec.Type != corev1.SecretTypeOpaque ||
		string(sec.Data["NGC_KEY"]) != testNGCKey || string(sec.Data["HF_TOKEN"]) != "hf_golden" || len(sec.Data) != 2 ||
		sec.Labels[ManagedByLabel] != ManagedByValue {
		t.Fatalf("secret = %+v", objs.Children[0])
	}
	env := objs.Job.Spec.Template.Spec.Containers[0].Env
	found := 0
	for _, e := range env {
		if e.Name == "NGC_KEY" || e.Name == "HF_TOKEN" {
			found++
			if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
				e.ValueFrom.SecretKeyRef.Name != "train-env" || e.ValueFrom.SecretKeyRef.Key != e.Name {
				t.Errorf("env %+v, want a secretKeyRef to train-env", e)
			}
		}
	}
	if found != 2 {
		t.Errorf("env = %+v, want NGC_KEY and HF_TOKEN", env)
	}
	var buf bytes.Buffer
	for _, obj := range objs.All() {
		b, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	golden.Check(t, "secret-env.yaml", buf.String())

	// With staging the S3 Secret comes first (the pod's stager needs it), then this one.
	st := stagedSpec()
	st.SecretEnv = []KeyValue{{"NGC_KEY", testNGCKey}}
	children := Build(st).Children
	if len(children) < 2 || children[0].(*corev1.Secret).Name != "train-s3" || children[1].(*corev1.Secret).Name != "train-env" {
		t.Fatalf("children = %+v", children)
	}
}
