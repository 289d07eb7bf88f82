package util

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// RESTConfigGetter is a Factory that can hand out its REST config. exec and port-forward need
// one: their streaming subresources are not reachable through a typed client, and kubectl's
// executors dial the API server themselves.
type RESTConfigGetter interface {
	RESTConfig() (*rest.Config, error)
}

// CoreRESTConfig returns f's REST config set up for the core API group (as kubectl sets it up
// for exec and port-forward), so that rest.RESTClientFor accepts it. Factories that cannot
// give one fail with a plain error.
func CoreRESTConfig(f Factory) (*rest.Config, error) {
	g, ok := f.(RESTConfigGetter)
	if !ok {
		return nil, fmt.Errorf("this client cannot stream to pods (no REST config)")
	}
	cfg, err := g.RESTConfig()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.GroupVersion = &schema.GroupVersion{Version: "v1"}
	cfg.APIPath = "/api"
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return cfg, nil
}

// RESTConfig is the config KubernetesClient uses, applying the same TAO_* environment.
func (f *factory) RESTConfig() (*rest.Config, error) { return f.restConfig() }
