// Package fakefactory is the cmdutil.Factory of command tests: a fixed namespace and injected
// fake clients, so a command runs without a cluster.
package fakefactory

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	fakedynamic "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Factory is a cmdutil.Factory for command tests: a fixed namespace and an injected client (a fake
// clientset, and a fake dynamic client for custom resources), or an error for commands that
// must not reach a cluster.
type Factory struct {
	NS        string
	Client    kubernetes.Interface
	Dynamic   dynamic.Interface
	ClientErr error
	// Config is what RESTConfig returns (exec, port-forward); nil gives a placeholder host.
	Config *rest.Config
}

// Namespace returns NS, or "default".
func (f *Factory) Namespace() (string, error) {
	if f.NS == "" {
		return "default", nil
	}
	return f.NS, nil
}

// KubernetesClient returns Client, or ClientErr when set.
func (f *Factory) KubernetesClient() (kubernetes.Interface, error) {
	if f.ClientErr != nil {
		return nil, f.ClientErr
	}
	return f.Client, nil
}

// DynamicClient returns Dynamic, or ClientErr when set; without Dynamic, an empty fake (a
// cluster without custom resources).
func (f *Factory) DynamicClient() (dynamic.Interface, error) {
	if f.ClientErr != nil {
		return nil, f.ClientErr
	}
	if f.Dynamic == nil {
		return fakedynamic.NewSimpleDynamicClient(runtime.NewScheme()), nil
	}
	return f.Dynamic, nil
}

// RESTConfig returns Config, or ClientErr when set.
func (f *Factory) RESTConfig() (*rest.Config, error) {
	if f.ClientErr != nil {
		return nil, f.ClientErr
	}
	if f.Config == nil {
		return &rest.Config{Host: "https://127.0.0.1:6443"}, nil
	}
	return f.Config, nil
}
