package cmdutil

import (
	"errors"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// FakeFactory is a Factory for command tests: a fixed namespace and an injected client (a fake
// clientset, and a fake dynamic client for custom resources), or an error for commands that
// must not reach a cluster.
type FakeFactory struct {
	NS        string
	Client    kubernetes.Interface
	Dynamic   dynamic.Interface
	ClientErr error
}

// Namespace returns NS, or "default".
func (f *FakeFactory) Namespace() (string, error) {
	if f.NS == "" {
		return "default", nil
	}
	return f.NS, nil
}

// KubernetesClient returns Client, or ClientErr when set.
func (f *FakeFactory) KubernetesClient() (kubernetes.Interface, error) {
	if f.ClientErr != nil {
		return nil, f.ClientErr
	}
	return f.Client, nil
}

// DynamicClient returns Dynamic, or ClientErr when set; a test that reaches it without setting
// Dynamic gets an error rather than a nil client.
func (f *FakeFactory) DynamicClient() (dynamic.Interface, error) {
	if f.ClientErr != nil {
		return nil, f.ClientErr
	}
	if f.Dynamic == nil {
		return nil, errors.New("FakeFactory: no dynamic client set")
	}
	return f.Dynamic, nil
}
