package util

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

type steps struct {
	failAt string
	done   []string
}

func (s *steps) step(name string) error {
	s.done = append(s.done, name)
	if s.failAt == name {
		return errors.New(name + " failed")
	}
	return nil
}

func (s *steps) Complete(*cobra.Command, []string) error { return s.step("complete") }
func (s *steps) Validate() error                         { return s.step("validate") }
func (s *steps) Run(context.Context) error               { return s.step("run") }

func TestRunEStopsAtTheFirstError(t *testing.T) {
	for failAt, want := range map[string][]string{
		"":         {"complete", "validate", "run"},
		"complete": {"complete"},
		"validate": {"complete", "validate"},
		"run":      {"complete", "validate", "run"},
	} {
		s := &steps{failAt: failAt}
		err := RunE(s)(&cobra.Command{}, nil)
		if (err != nil) != (failAt != "") || !reflect.DeepEqual(s.done, want) {
			t.Errorf("failing at %q: ran %v, err %v; want %v", failAt, s.done, err, want)
		}
	}
}

func TestCompleteJobs(t *testing.T) {
	f := namespaceOnly("ml")
	ns, names, err := CompleteJobs(f, []string{"a", "job/b", "jobs.batch/c"})
	if err != nil || ns != "ml" || !reflect.DeepEqual(names, []string{"a", "b", "c"}) {
		t.Errorf("CompleteJobs = %q, %v, %v", ns, names, err)
	}
	if ns, name, err := CompleteJob(f, []string{"job.batch/train"}); err != nil || ns != "ml" || name != "train" {
		t.Errorf("CompleteJob = %q, %q, %v", ns, name, err)
	}
	if _, _, err := CompleteJobs(f, []string{"a", "pod/b"}); exitcode.Of(err) != exitcode.Usage {
		t.Errorf("CompleteJobs(pod/b) = %v, want a usage error", err)
	}
}

func TestValidateTimeout(t *testing.T) {
	if err := ValidateTimeout(0); err != nil {
		t.Errorf("ValidateTimeout(0) = %v", err)
	}
	if err := ValidateTimeout(-1); exitcode.Of(err) != exitcode.Usage {
		t.Errorf("ValidateTimeout(-1) = %v, want a usage error", err)
	}
}

// namespaceOnly is a Factory that knows only its namespace: enough for the Complete helpers.
type namespaceOnly string

func (n namespaceOnly) Namespace() (string, error) { return string(n), nil }
func (namespaceOnly) KubernetesClient() (kubernetes.Interface, error) {
	return nil, errors.New("no cluster")
}
func (namespaceOnly) DynamicClient() (dynamic.Interface, error) { return nil, errors.New("no cluster") }
