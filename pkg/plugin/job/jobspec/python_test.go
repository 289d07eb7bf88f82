package jobspec

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestBuildPythonUnbuffered: every training container gets PYTHONUNBUFFERED=1 unless the user
// sets the variable, from any source of the container's env; then theirs is the only one, an
// empty value (Python's "off") included.
func TestBuildPythonUnbuffered(t *testing.T) {
	tests := []struct {
		name string
		spec func(*Spec)
		// want is the one PYTHONUNBUFFERED variable the container must have.
		want corev1.EnvVar
	}{
		{"default on", func(*Spec) {}, corev1.EnvVar{Name: "PYTHONUNBUFFERED", Value: "1"}},
		{"default on in a multi-node job", func(s *Spec) { s.Name, s.Nodes = "ddp", 2 },
			corev1.EnvVar{Name: "PYTHONUNBUFFERED", Value: "1"}},
		{"default on with staging", func(s *Spec) { *s = stagedSpec() },
			corev1.EnvVar{Name: "PYTHONUNBUFFERED", Value: "1"}},
		{"default on beside other --env", func(s *Spec) { s.Env = []KeyValue{{"NCCL_DEBUG", "INFO"}} },
			corev1.EnvVar{Name: "PYTHONUNBUFFERED", Value: "1"}},
		{"--env value wins", func(s *Spec) { s.Env = []KeyValue{{"NCCL_DEBUG", "INFO"}, {"PYTHONUNBUFFERED", "x"}} },
			corev1.EnvVar{Name: "PYTHONUNBUFFERED", Value: "x"}},
		{"--env empty turns it off", func(s *Spec) { s.Env = []KeyValue{{"PYTHONUNBUFFERED", ""}} },
			corev1.EnvVar{Name: "PYTHONUNBUFFERED", Value: ""}},
		{"--env empty with staging", func(s *Spec) { *s = stagedSpec(); s.Env = []KeyValue{{"PYTHONUNBUFFERED", ""}} },
			corev1.EnvVar{Name: "PYTHONUNBUFFERED", Value: ""}},
		{"--secret-env wins", func(s *Spec) { s.SecretEnv = []KeyValue{{"PYTHONUNBUFFERED", "0"}} },
			corev1.EnvVar{Name: "PYTHONUNBUFFERED", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "train-env"}, Key: "PYTHONUNBUFFERED",
			}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			tc.spec(&s)
			if err := s.Validate(); err != nil {
				t.Fatalf("spec is invalid: %v", err)
			}
			pod := Build(s).Job.Spec.Template.Spec
			var got []corev1.EnvVar
			for _, e := range pod.Containers[0].Env {
				if e.Name == EnvPythonUnbuffered {
					got = append(got, e)
				}
			}
			if len(got) != 1 || got[0].Value != tc.want.Value || (got[0].ValueFrom == nil) != (tc.want.ValueFrom == nil) ||
				(tc.want.ValueFrom != nil && *got[0].ValueFrom.SecretKeyRef != *tc.want.ValueFrom.SecretKeyRef) {
				t.Errorf("PYTHONUNBUFFERED in the container: %+v, want only %+v", got, tc.want)
			}
			// Only the training container: init containers run kubectl-tao, not Python.
			for _, c := range pod.InitContainers {
				for _, e := range c.Env {
					if e.Name == EnvPythonUnbuffered {
						t.Errorf("init container %s has %+v", c.Name, e)
					}
				}
			}
		})
	}
}
