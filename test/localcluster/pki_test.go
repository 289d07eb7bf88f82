package localcluster

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestPKICertsVerifyAgainstCA(t *testing.T) {
	now := time.Now()
	p, err := NewPKI(now)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.CA.Cert)
	if !p.CA.Cert.IsCA {
		t.Error("CA certificate is not a CA")
	}

	// The serving certificate must be valid for every name clients use.
	for _, name := range []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "127.0.0.1", "10.96.0.1"} {
		if _, err := p.APIServer.Cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("apiserver certificate not valid for %s: %v", name, err)
		}
	}
	if slices.ContainsFunc(p.APIServer.Cert.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.ParseIP("0.0.0.0")) }) {
		t.Error("apiserver certificate covers 0.0.0.0")
	}

	clients := []struct {
		name string
		kp   *KeyPair
		cn   string
		org  []string
	}{
		{"admin", p.Admin, "kubernetes-admin", []string{"system:masters"}},
		{"kubelet client", p.APIServerKubelet, "kube-apiserver-kubelet-client", []string{"system:masters"}},
		{"controller-manager", p.ControllerManager, "system:kube-controller-manager", nil},
		{"scheduler", p.Scheduler, "system:kube-scheduler", nil},
		{"kwok", p.Kwok, "kwok", []string{"system:masters"}},
	}
	for _, c := range clients {
		if _, err := c.kp.Cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s certificate does not verify as a client: %v", c.name, err)
		}
		if _, err := c.kp.Cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
			t.Errorf("%s certificate also verifies as a server; want client only", c.name)
		}
		if c.kp.Cert.Subject.CommonName != c.cn || !slices.Equal(c.kp.Cert.Subject.Organization, c.org) {
			t.Errorf("%s subject = %v, want CN=%s O=%v", c.name, c.kp.Cert.Subject, c.cn, c.org)
		}
		if c.kp.Cert.NotAfter.Before(now.Add(300 * 24 * time.Hour)) {
			t.Errorf("%s certificate expires too soon: %v", c.name, c.kp.Cert.NotAfter)
		}
	}
}

func TestPKIWriteFiles(t *testing.T) {
	p, err := NewPKI(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "pki")
	if err := p.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{fileCACert, fileCAKey, fileAPIServerCert, fileAPIServerKey, fileKubeletCert, fileKubeletKey, fileSAKey, fileSAPub,
		fileFrontProxyCA, fileFrontProxyCrt, fileFrontProxyKey} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Errorf("missing %s: %v", f, err)
			continue
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is readable by others: %v", f, fi.Mode())
		}
	}
}

// The aggregation layer's client certificate: a client of its own CA (not the cluster CA, whose
// client certificates must not be able to assert users through request headers), with the
// one CN the apiserver allows.
func TestPKIFrontProxy(t *testing.T) {
	p, err := NewPKI(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	front := x509.NewCertPool()
	front.AddCert(p.FrontProxyCA.Cert)
	if _, err := p.FrontProxyClient.Cert.Verify(x509.VerifyOptions{Roots: front, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("front-proxy client does not verify against the front-proxy CA: %v", err)
	}
	if p.FrontProxyClient.Cert.Subject.CommonName != FrontProxyClientName {
		t.Errorf("front-proxy client CN = %q, want %q", p.FrontProxyClient.Cert.Subject.CommonName, FrontProxyClientName)
	}
	cluster := x509.NewCertPool()
	cluster.AddCert(p.CA.Cert)
	if _, err := p.FrontProxyClient.Cert.Verify(x509.VerifyOptions{Roots: cluster, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("front-proxy client verifies against the cluster CA; want a CA of its own")
	}
	if _, err := p.Admin.Cert.Verify(x509.VerifyOptions{Roots: front, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("the admin certificate verifies against the front-proxy CA")
	}
}
