package cmdutil

import (
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// FakeFactory is a Factory for command tests: a fixed namespace and an injected client (a fake
// clientset), or an error for commands that must not reach a cluster.
type FakeFactory struct {
	NS        string
	Client    kubernetes.Interface
	ClientErr error
	// Config is what RESTConfig returns (exec, port-forward); nil gives a placeholder host.
	Config *rest.Config
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
