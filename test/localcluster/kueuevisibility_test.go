package localcluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// With a visibility port, the configuration turns VisibilityOnDemand on and binds its server to
// loopback at that port (its default is :8082 on every interface); without one it is off.
func TestKueueConfigurationVisibility(t *testing.T) {
	for _, tc := range []struct {
		name     string
		port     int
		wantGate bool
	}{{"on", 41004, true}, {"off", 0, false}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := KueueConfiguration(KueuePorts{Health: 41001, Metrics: 41002, Webhook: 41003, Visibility: tc.port}, "/certs")
			var m map[string]any
			if err := yaml.Unmarshal([]byte(cfg), &m); err != nil {
				t.Fatalf("configuration is not YAML: %v\n%s", err, cfg)
			}
			gate, found, _ := unstructured.NestedBool(m, "featureGates", "VisibilityOnDemand")
			if !found || gate != tc.wantGate {
				t.Errorf("featureGates.VisibilityOnDemand = %v (set: %v), want %v\n%s", gate, found, tc.wantGate, cfg)
			}
			addr, _, _ := unstructured.NestedString(m, "visibilityServer", "bindAddress")
			port, _, _ := unstructured.NestedFieldNoCopy(m, "visibilityServer", "bindPort")
			if tc.wantGate && (addr != "127.0.0.1" || port != float64(tc.port)) {
				t.Errorf("visibilityServer = %s:%v, want 127.0.0.1:%d", addr, port, tc.port)
			}
			if !tc.wantGate && (addr != "" || port != nil) {
				t.Errorf("visibilityServer set with the feature off: %s:%v", addr, port)
			}
		})
	}
}

// The Service resolves to loopback without kube-proxy (ExternalName) and the APIService
// routes Kueue's visibility API there, checked against the seeded certificate.
func TestVisibilityObjects(t *testing.T) {
	svc, api := VisibilityObjects(41004, []byte("PEM"))
	if typ, _, _ := unstructured.NestedString(svc.Object, "spec", "type"); typ != "ExternalName" {
		t.Errorf("Service type %q, want ExternalName", typ)
	}
	if name, _, _ := unstructured.NestedString(svc.Object, "spec", "externalName"); name != "127.0.0.1" {
		t.Errorf("externalName %q, want 127.0.0.1", name)
	}
	if svc.GetNamespace() != kueueNamespace || svc.GetName() != visibilityServiceName {
		t.Errorf("Service %s/%s", svc.GetNamespace(), svc.GetName())
	}
	if api.GetName() != "v1beta2.visibility.kueue.x-k8s.io" || api.GetKind() != "APIService" {
		t.Errorf("APIService %s %s", api.GetKind(), api.GetName())
	}
	spec, _, _ := unstructured.NestedMap(api.Object, "spec")
	for k, want := range map[string]any{"group": "visibility.kueue.x-k8s.io", "version": "v1beta2", "groupPriorityMinimum": int64(100),
		"versionPriority": int64(100), "caBundle": base64.StdEncoding.EncodeToString([]byte("PEM"))} {
		if spec[k] != want {
			t.Errorf("spec.%s = %v, want %v", k, spec[k], want)
		}
	}
	if _, skip := spec["insecureSkipTLSVerify"]; skip {
		t.Error("insecureSkipTLSVerify set; the caBundle checks the server")
	}
	ref, _, _ := unstructured.NestedMap(api.Object, "spec", "service")
	if ref["name"] != visibilityServiceName || ref["namespace"] != kueueNamespace || ref["port"] != int64(41004) {
		t.Errorf("spec.service = %v", ref)
	}
}

// checkVisibilityPair fails unless dir holds a matching pair that the aggregator accepts: the
// certificate verifies against itself as the caBundle for the Service's name, and 127.0.0.1.
func checkVisibilityPair(t *testing.T, dir string, caBundle []byte, at time.Time) {
	t.Helper()
	certPEM, err := os.ReadFile(filepath.Join(dir, "apiserver.crt"))
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "apiserver.key"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(certPEM, caBundle) {
		t.Error("the returned caBundle is not the certificate on disk")
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatalf("certificate and key do not match: %v", err)
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caBundle)
	for _, name := range []string{"visibility-server.kueue-system.svc", "127.0.0.1", "localhost"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("not valid for %s against the caBundle: %v", name, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "apiserver.key")); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("key mode %v (%v), want private", fi.Mode(), err)
	}
}

func TestEnsureVisibilityCert(t *testing.T) {
	ctx, now := context.Background(), time.Now()
	dir := filepath.Join(t.TempDir(), "visibility")

	first, err := EnsureVisibilityCert(ctx, dir, now, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	checkVisibilityPair(t, dir, first, now)

	// A valid pair is kept: clusters already serving with it go on doing so.
	again, err := EnsureVisibilityCert(ctx, dir, now.Add(time.Hour), os.Stderr)
	if err != nil || !bytes.Equal(again, first) {
		t.Fatalf("a valid pair was replaced (%v)", err)
	}

	// One about to expire is replaced.
	later, err := EnsureVisibilityCert(ctx, dir, now.Add(certValidity-visibilityCertMinLife/2), os.Stderr)
	if err != nil || bytes.Equal(later, first) {
		t.Fatalf("an expiring pair was kept (%v)", err)
	}
	checkVisibilityPair(t, dir, later, now.Add(certValidity-visibilityCertMinLife/2))

	// A key that does not match the certificate (what an unlocked writer could leave) is
	// replaced by a matching pair.
	otherCert, _, err := newVisibilityPair(now)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "apiserver.crt"), otherCert, 0o644); err != nil {
		t.Fatal(err)
	}
	fixed, err := EnsureVisibilityCert(ctx, dir, now, os.Stderr)
	if err != nil || bytes.Equal(fixed, otherCert) {
		t.Fatalf("a mismatched pair was kept (%v)", err)
	}
	checkVisibilityPair(t, dir, fixed, now)

	// Garbage too.
	if err := os.WriteFile(filepath.Join(dir, "apiserver.key"), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	fixed, err = EnsureVisibilityCert(ctx, dir, now, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	checkVisibilityPair(t, dir, fixed, now)
	if left, _ := filepath.Glob(filepath.Join(dir, ".apiserver.*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// Launchers of clusters starting together on one host agree on one pair: each returns the
// certificate on disk, and it matches the key.
func TestEnsureVisibilityCertConcurrent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "visibility")
	const n = 8
	got := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = EnsureVisibilityCert(context.Background(), dir, time.Now(), io.Discard)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !bytes.Equal(got[i], got[0]) {
			t.Fatalf("launcher %d got another certificate", i)
		}
	}
	checkVisibilityPair(t, dir, got[0], time.Now())
}

// A directory that cannot be made is an error the launcher reports (and runs Kueue without
// the visibility API), never a panic or a half-written pair.
func TestEnsureVisibilityCertUnwritable(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(parent, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := EnsureVisibilityCert(context.Background(), filepath.Join(parent, "visibility"), time.Now(), os.Stderr)
	if err == nil || !strings.Contains(err.Error(), "create") {
		t.Fatalf("err = %v, want a create error", err)
	}
}

// The manager only logs a visibility server that did not start: a port lost between picking
// and binding is a portInUseError (the launcher starts Kueue again on new ports), another
// failure an error, a log without it nil.
func TestVisibilityFailure(t *testing.T) {
	inUse := `{"level":"error","ts":"2026-12-02T03:14:41Z","logger":"setup","msg":"Unable to create and start visibility server","error":"failed to create listener: failed to listen on 127.0.0.1:41004: listen tcp 127.0.0.1:41004: bind: address already in use"}`
	other := `{"level":"error","logger":"setup","msg":"Unable to create and start visibility server","error":"unable to apply VisibilityServerOptions: error creating self-signed certificates: mkdir /visibility: permission denied"}`
	ready := `I1202 03:14:41.910026    8243 dynamic_serving_content.go:135] "Starting controller" name="serving-cert::/visibility/apiserver.crt::/visibility/apiserver.key"`
	for _, tc := range []struct {
		name      string
		log       string
		wantErr   bool
		wantInUse bool
	}{
		{"started", "a\n" + ready + "\n", false, false},
		{"port taken", ready + "\n" + inUse + "\nmore\n", true, true},
		{"other failure", other, true, false},
		{"empty log", "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := visibilityFailure(tc.log)
			var pe *portInUseError
			if (err != nil) != tc.wantErr || errors.As(err, &pe) != tc.wantInUse {
				t.Errorf("visibilityFailure() = %v (port in use: %v), want error %v, port in use %v", err, errors.As(err, &pe), tc.wantErr, tc.wantInUse)
			}
		})
	}
}
