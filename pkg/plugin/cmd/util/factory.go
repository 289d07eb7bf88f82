// Package util is the glue every kubectl-tao command shares: how clients and the namespace
// are resolved from kubectl's flags and the TAO_* environment, the --dry-run flag, the
// Complete/Validate/Run steps of a command, and the AGE cell of its tables.
package util

import (
	"errors"
	"fmt"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubectl-tao/kubectl-tao/pkg/plugin/util/exitcode"
)

// Environment variables that stand in for --context and --namespace when those are not given.
const (
	EnvContext   = "TAO_K8S_CONTEXT"
	EnvNamespace = "TAO_K8S_NAMESPACE"
)

// Client-side rate limits. client-go's defaults (5 QPS, burst 10) throttle the fan-out some
// commands do (one request per rank); the API server's priority and fairness still protects it.
const (
	clientQPS   = 50
	clientBurst = 100
)

// Factory hands commands what they need to reach the cluster. Commands take this interface so
// that tests can inject a fake clientset.
type Factory interface {
	// Namespace is the namespace to work in: --namespace, else $TAO_K8S_NAMESPACE, else the
	// kubeconfig context's namespace, else "default". It never contacts the server.
	Namespace() (string, error)
	// KubernetesClient returns a typed client, or an error with exit code NoCluster when no
	// cluster is configured.
	KubernetesClient() (kubernetes.Interface, error)
	// DynamicClient returns a client for custom resources (Kueue's), whose Go types the plugin
	// does not import; same errors as KubernetesClient.
	DynamicClient() (dynamic.Interface, error)
}

// NewFactory wraps kubectl's standard flags. getenv is os.Getenv outside tests.
func NewFactory(flags *genericclioptions.ConfigFlags, getenv func(string) string) Factory {
	return &factory{flags: flags, getenv: getenv}
}

type factory struct {
	flags  *genericclioptions.ConfigFlags
	getenv func(string) string
	client kubernetes.Interface
	dyn    dynamic.Interface
	// requests, when above the default burst, is how many requests a command sends at once.
	requests int
}

// RateLimitRaiser is a Factory whose client-side rate limit can be raised for a fan-out.
type RateLimitRaiser interface {
	RaiseRateLimit(requests int)
}

// RaiseRateLimit sizes f's client-side rate limit so that requests concurrent requests (plus a
// few lists and watches) are never queued by client-go; call it before KubernetesClient.
// Factories that cannot (test fakes) are left as they are.
func RaiseRateLimit(f Factory, requests int) {
	if r, ok := f.(RateLimitRaiser); ok {
		r.RaiseRateLimit(requests)
	}
}

// rateLimitHeadroom leaves room, above a fan-out, for the lists and watches around it.
const rateLimitHeadroom = 10

func (f *factory) RaiseRateLimit(requests int) {
	if requests+rateLimitHeadroom > clientBurst && requests > f.requests {
		f.requests = requests
		f.client = nil
	}
}

// rateLimit is client-go's QPS and burst for this factory's client.
func (f *factory) rateLimit() (float32, int) {
	if f.requests+rateLimitHeadroom <= clientBurst {
		return clientQPS, clientBurst
	}
	return float32(max(clientQPS, f.requests)), f.requests + rateLimitHeadroom
}

// applyEnv fills --context and --namespace from the environment when the flags are empty, so
// that a flag always beats the environment, and the environment beats the kubeconfig.
func (f *factory) applyEnv() {
	if f.flags.Context != nil && *f.flags.Context == "" {
		*f.flags.Context = f.getenv(EnvContext)
	}
	if f.flags.Namespace != nil && *f.flags.Namespace == "" {
		*f.flags.Namespace = f.getenv(EnvNamespace)
	}
}

func (f *factory) Namespace() (string, error) {
	f.applyEnv()
	ns, _, err := f.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("resolving the namespace: %w", err)
	}
	return ns, nil
}

func (f *factory) KubernetesClient() (kubernetes.Interface, error) {
	if f.client != nil {
		return f.client, nil
	}
	cfg, err := f.restConfig()
	if err != nil {
		return nil, err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	f.client = c
	return c, nil
}

func (f *factory) DynamicClient() (dynamic.Interface, error) {
	if f.dyn != nil {
		return f.dyn, nil
	}
	cfg, err := f.restConfig()
	if err != nil {
		return nil, err
	}
	// Custom resources have no protobuf encoding: dynamic.NewForConfig switches to JSON.
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the dynamic client: %w", err)
	}
	f.dyn = d
	return d, nil
}

func (f *factory) restConfig() (*rest.Config, error) {
	f.applyEnv()
	if err := f.checkConfigured(); err != nil {
		return nil, err
	}
	cfg, err := f.flags.ToRESTConfig()
	if err != nil {
		return nil, exitcode.WithCode(exitcode.NoCluster, fmt.Errorf("loading the kubeconfig: %w", err))
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = f.rateLimit()
	// Typed clients can speak protobuf: a 5,000-node list decodes several times faster than JSON.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return cfg, nil
}

// errNoCluster is the contract's message for "no credentials at all".
var errNoCluster = errors.New("Could not authenticate to a Kubernetes cluster: no kubeconfig was found " +
	"and this is not running inside a cluster.\n" +
	"Point $KUBECONFIG or --kubeconfig at a kubeconfig file (check it with `kubectl get nodes`), " +
	"or run inside a pod with a service account")

// checkConfigured refuses early when there is nothing to connect to. Without this check
// client-go silently falls back to http://localhost:8080 and the user sees only
// "connection refused".
func (f *factory) checkConfigured() error {
	if f.flags.APIServer != nil && *f.flags.APIServer != "" {
		return nil
	}
	raw, err := f.flags.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return exitcode.WithCode(exitcode.NoCluster, fmt.Errorf("loading the kubeconfig: %w", err))
	}
	if len(raw.Clusters) > 0 {
		return nil
	}
	if _, err := rest.InClusterConfig(); err == nil {
		return nil
	}
	return exitcode.WithCode(exitcode.NoCluster, errNoCluster)
}
