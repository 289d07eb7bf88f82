package localcluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kueue's visibility API (visibility.kueue.x-k8s.io, the VisibilityOnDemand feature) is how
// Kueue tells a pending workload's position in its queues: an API server inside the manager,
// reached through the kube-apiserver's aggregation layer. Three things make it work for a host
// process:
//
//   - the kube-apiserver runs with the aggregation layer's front-proxy certificates (pki.go);
//   - an APIService names a Service of type ExternalName, 127.0.0.1: the aggregator resolves
//     it itself (no kube-proxy, no endpoints) to https://127.0.0.1:<service.port>;
//   - a serving certificate in /visibility, see VisibilityCertDir.
const (
	visibilityGroup       = "visibility.kueue.x-k8s.io"
	visibilityVersion     = "v1beta2"
	visibilityServiceName = "visibility-server"
	// visibilityServiceDNS is the name the aggregator checks the server's certificate for
	// (<service>.<namespace>.svc), whatever address the Service resolves to.
	visibilityServiceDNS = visibilityServiceName + "." + kueueNamespace + ".svc"
)

// VisibilityCertDir is where Kueue's visibility server reads its serving certificate
// (apiserver.crt and apiserver.key): hard-coded in Kueue v0.17 (pkg/visibility/server.go,
// certDir = "/visibility"), with no flag or configuration field to move it. When it finds no
// readable pair there, the manager writes a self-signed one itself, unlocked, which two
// clusters starting at once on one host could race on (one's key with the other's
// certificate). So the launcher seeds the pair itself before it starts the manager, under a
// lock, and every cluster on the host shares it: it only ever serves on loopback. It is the
// one path the local cluster writes outside its state dir and cache; a launcher that cannot
// write it (not root) runs Kueue without its visibility API. A variable for tests.
var VisibilityCertDir = "/visibility"

// Its file names, fixed by the generic apiserver's self-signed default (PairName "apiserver").
const (
	visibilityCertFile = "apiserver.crt"
	visibilityKeyFile  = "apiserver.key"
	// visibilityCertMinLife is how long a pair found in the directory must still be valid to
	// be reused; a shorter-lived one is replaced.
	visibilityCertMinLife = 30 * 24 * time.Hour
)

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// VisibilityAPIServiceName is the APIService of the visibility API's version the plugin reads.
const VisibilityAPIServiceName = visibilityVersion + "." + visibilityGroup

// EnsureVisibilityCert makes dir hold a valid serving pair for the visibility server and
// returns its certificate (PEM, the APIService's caBundle). A pair already there is kept when
// it parses, matches, names the Service and 127.0.0.1 and is valid for visibilityCertMinLife
// more; otherwise a new self-signed one is written, each file through a temporary file and a
// rename. The whole check-and-write holds an flock on dir, so launchers of clusters starting
// together agree on one pair.
func EnsureVisibilityCert(ctx context.Context, dir string, now time.Time, progress io.Writer) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	unlock, err := lockFile(ctx, dir, progress)
	if err != nil {
		return nil, err
	}
	defer unlock()
	certPath, keyPath := filepath.Join(dir, visibilityCertFile), filepath.Join(dir, visibilityKeyFile)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	if certErr == nil && keyErr == nil && visibilityPairUsable(certPEM, keyPEM, now) {
		return certPEM, nil
	}
	certPEM, keyPEM, err = newVisibilityPair(now)
	if err != nil {
		return nil, err
	}
	// The key first: a reader between the two renames sees the new key with the old
	// certificate, which does not match and is refused, never a pair half of which is unknown.
	if err := writeFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := writeFileAtomic(certPath, certPEM, 0o644); err != nil {
		return nil, err
	}
	return certPEM, nil
}

// visibilityPairUsable reports whether certPEM and keyPEM are a matching pair that serves the
// visibility API on loopback for visibilityCertMinLife more.
func visibilityPairUsable(certPEM, keyPEM []byte, now time.Time) bool {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil || len(pair.Certificate) == 0 {
		return false
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || now.Before(cert.NotBefore) || now.Add(visibilityCertMinLife).After(cert.NotAfter) {
		return false
	}
	return cert.VerifyHostname(visibilityServiceDNS) == nil && cert.VerifyHostname("127.0.0.1") == nil
}

// newVisibilityPair is a self-signed serving certificate for the Service name, localhost and
// 127.0.0.1; being its own issuer it is also the caBundle the aggregator checks it with.
func newVisibilityPair(now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate visibility server key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "kubectl-tao-localcluster-kueue-visibility"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
		DNSNames:    []string{visibilityServiceDNS, "localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("self-sign visibility server certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal visibility server key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// writeFileAtomic writes data to path through a temporary file in the same directory and a
// rename, so a reader sees the old content or the new, never a part.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, perm)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// VisibilityObjects are the Service and APIService that route the visibility API to the
// manager's visibility server on 127.0.0.1:port, checked against caBundle (as Kueue's own
// config/components/visibility manifests, with the CA instead of insecureSkipTLSVerify).
func VisibilityObjects(port int, caBundle []byte) (svc, apiService *unstructured.Unstructured) {
	svc = &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": visibilityServiceName, "namespace": kueueNamespace},
		"spec":     map[string]any{"type": "ExternalName", "externalName": "127.0.0.1"},
	}}
	apiService = &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": VisibilityAPIServiceName},
		"spec": map[string]any{
			"group": visibilityGroup, "version": visibilityVersion,
			"groupPriorityMinimum": int64(100), "versionPriority": int64(100),
			"caBundle": base64.StdEncoding.EncodeToString(caBundle),
			"service": map[string]any{
				"name": visibilityServiceName, "namespace": kueueNamespace, "port": int64(port),
			},
		},
	}}
	return svc, apiService
}
