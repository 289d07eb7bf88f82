package jobspec

import (
	"strings"
	"testing"
	"time"
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
		{"reserved env multi-node", func(s *Spec) { s.Nodes, s.Env = 2, []KeyValue{{"MASTER_ADDR", "x"}} }, `invalid --env "MASTER_ADDR"`},
		{"bad env-from-secret", func(s *Spec) { s.EnvFromSecrets = []string{"Creds"} }, `invalid --env-from-secret "Creds"`},
		{"bad image-pull-secret", func(s *Spec) { s.ImagePullSecrets = []string{"ngc_key"} }, `invalid --image-pull-secret "ngc_key"`},
		{"bad label key", func(s *Spec) { s.Labels = []KeyValue{{"-team", "a"}} }, `invalid --label key "-team"`},
		{"bad label value", func(s *Spec) { s.Labels = []KeyValue{{"team", "a b"}} }, `invalid --label value "a b"`},
		{"long label value", func(s *Spec) { s.Labels = []KeyValue{{"team", strings.Repeat("x", 64)}} }, "invalid --label value"},
		{"reserved label", func(s *Spec) { s.Labels = []KeyValue{{ManagedByLabel, "me"}} }, "reserved"},
		{"controller label", func(s *Spec) { s.Labels = []KeyValue{{"batch.kubernetes.io/job-name", "x"}} }, "reserved"},
		{"bad selector key", func(s *Spec) { s.NodeSelector = []KeyValue{{"a/b/c", "x"}} }, `invalid --node-selector key "a/b/c"`},
		{"bad selector value", func(s *Spec) { s.NodeSelector = []KeyValue{{"gpu", "H100 80GB"}} }, "invalid --node-selector value"},
		{"bad annotation key", func(s *Spec) { s.Annotations = []KeyValue{{"no spaces", "x"}} }, `invalid --annotation key "no spaces"`},
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
