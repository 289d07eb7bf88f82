package localcluster

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func TestKueueConfigurationListensOnLoopbackPortsGiven(t *testing.T) {
	cfg := KueueConfiguration(KueuePorts{Health: 41001, Metrics: 41002, Webhook: 41003}, "/state/kueue/certs")
	var m map[string]any
	if err := yaml.Unmarshal([]byte(cfg), &m); err != nil {
		t.Fatalf("configuration is not YAML: %v\n%s", err, cfg)
	}
	for path, want := range map[string]any{
		"health.healthProbeBindAddress": "127.0.0.1:41001",
		"metrics.bindAddress":           "127.0.0.1:41002",
		"webhook.host":                  "127.0.0.1",
		"webhook.port":                  float64(41003),
		"webhook.certDir":               "/state/kueue/certs",
		"leaderElection.leaderElect":    false,
		"manageJobsWithoutQueueName":    false,
		"namespace":                     "kueue-system",
	} {
		got, _, _ := unstructured.NestedFieldNoCopy(m, strings.Split(path, ".")...)
		if got != want {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	if fw, _, _ := unstructured.NestedStringSlice(m, "integrations", "frameworks"); len(fw) != 1 || fw[0] != "batch/job" {
		t.Errorf("frameworks = %v, want only batch/job", fw)
	}
}

// The rotator parses the CA key as PKCS#1 and checks the serving certificate for the Service
// name; the apiserver calls the webhook at 127.0.0.1.
func TestKueueCertsAreWhatTheRotatorAndTheAPIServerAccept(t *testing.T) {
	c, err := newKueueCerts(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(c.caKey)
	if block == nil || block.Type != "RSA PRIVATE KEY" {
		t.Fatalf("CA key is not PEM RSA PRIVATE KEY: %q", c.caKey)
	}
	if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err != nil {
		t.Fatalf("CA key is not PKCS#1: %v", err)
	}
	if _, err := tls.X509KeyPair(c.cert, c.key); err != nil {
		t.Fatalf("serving pair: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.caCert) {
		t.Fatal("CA certificate does not parse")
	}
	cb, _ := pem.Decode(c.cert)
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{kueueServiceDNS, "127.0.0.1"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: pool}); err != nil {
			t.Errorf("serving certificate for %s: %v", name, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: pool}); err == nil {
		t.Error("serving certificate verifies for example.com; want only the Service name and 127.0.0.1")
	}
}

func TestKueueCRDConversionOnlyForMultiVersionCRDs(t *testing.T) {
	const multi = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: workloads.kueue.x-k8s.io}
spec:
  versions: [{name: v1beta1}, {name: v1beta2}]
`
	const single = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: topologies.kueue.x-k8s.io}
spec:
  versions: [{name: v1beta1}]
`
	u, err := KueueCRD([]byte(multi), 41003, []byte("CA"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(u.Object, "spec", "conversion", "webhook", "clientConfig", "url"); got != "https://127.0.0.1:41003/convert" {
		t.Errorf("conversion url = %q", got)
	}
	if got, _, _ := unstructured.NestedString(u.Object, "spec", "conversion", "webhook", "clientConfig", "caBundle"); got != base64.StdEncoding.EncodeToString([]byte("CA")) {
		t.Errorf("caBundle = %q", got)
	}
	// DeepCopy panics on values that are not JSON types; the dynamic client copies objects.
	_ = u.DeepCopy()
	u, err = KueueCRD([]byte(single), 41003, []byte("CA"))
	if err != nil {
		t.Fatal(err)
	}
	if _, found, _ := unstructured.NestedMap(u.Object, "spec", "conversion"); found {
		t.Error("a single-version CRD got a conversion webhook")
	}
	if _, err := KueueCRD([]byte("kind: ConfigMap\nmetadata: {name: x}\n"), 1, nil); err == nil {
		t.Error("a non-CRD document was accepted")
	}
}
