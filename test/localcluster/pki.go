package localcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certValidity is long enough that a cluster left up for a long demo never sees an expired cert,
// and short enough to be obviously a throwaway.
const certValidity = 365 * 24 * time.Hour

// KeyPair is a certificate with its private key, kept both parsed and PEM-encoded because the
// apiserver wants files while the launcher itself wants a tls.Config.
type KeyPair struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	KeyPEM  []byte
}

// CertSpec describes one leaf certificate.
type CertSpec struct {
	CommonName   string
	Organization []string
	DNSNames     []string
	IPs          []net.IP
	Server       bool
	Client       bool
}

// NewCA creates a self-signed CA. ECDSA P-256 keeps generation in the milliseconds, which
// matters for the 10 s ready budget; every component we run accepts it.
func NewCA(commonName string, now time.Time) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA %q: %w", commonName, err)
	}
	return newKeyPair(der, key)
}

// Issue signs a leaf certificate for spec with the CA.
func (ca *KeyPair) Issue(spec CertSpec, now time.Time) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key for %q: %w", spec.CommonName, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	var usages []x509.ExtKeyUsage
	if spec.Server {
		usages = append(usages, x509.ExtKeyUsageServerAuth)
	}
	if spec.Client {
		usages = append(usages, x509.ExtKeyUsageClientAuth)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: spec.CommonName, Organization: spec.Organization},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
		DNSNames:     spec.DNSNames,
		IPAddresses:  spec.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate %q: %w", spec.CommonName, err)
	}
	return newKeyPair(der, key)
}

func newKeyPair(der []byte, key *ecdsa.PrivateKey) (*KeyPair, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse freshly signed certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal private key: %w", err)
	}
	return &KeyPair{
		Cert:    cert,
		Key:     key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, fmt.Errorf("generate certificate serial: %w", err)
	}
	return serial, nil
}

// PKI is every credential the cluster needs.
type PKI struct {
	CA                *KeyPair
	APIServer         *KeyPair
	APIServerKubelet  *KeyPair
	Admin             *KeyPair
	ControllerManager *KeyPair
	Scheduler         *KeyPair
	Kwok              *KeyPair
	// FrontProxyCA and FrontProxyClient enable the apiserver's aggregation layer: the
	// apiserver proxies a request for an aggregated API (Kueue's visibility API) with the
	// client certificate, and the aggregated server trusts the user named in its headers only
	// from a certificate of this CA (published in kube-system/extension-apiserver-authentication).
	// A CA of its own, as kubeadm does: a client certificate of the cluster CA must not be able
	// to assert any user through those headers.
	FrontProxyCA     *KeyPair
	FrontProxyClient *KeyPair
	// ServiceAccountKeyPEM signs service-account tokens; the apiserver verifies with its public
	// half, which it can read from the same PKCS#8 file.
	ServiceAccountKeyPEM []byte
	ServiceAccountPubPEM []byte
}

// APIServerSANs are the names clients inside and outside the cluster use for the apiserver.
// 10.96.0.1 is the first address of the service CIDR, the in-cluster "kubernetes" Service.
var apiServerDNSNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}

func apiServerIPs() []net.IP {
	return []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")}
}

// NewPKI creates the CA, the apiserver serving certificate and one client certificate per
// component.
func NewPKI(now time.Time) (*PKI, error) {
	ca, err := NewCA("kubectl-tao-localcluster-ca", now)
	if err != nil {
		return nil, err
	}
	p := &PKI{CA: ca}
	leaves := []struct {
		dst  **KeyPair
		spec CertSpec
	}{
		{&p.APIServer, CertSpec{CommonName: "kube-apiserver", DNSNames: apiServerDNSNames, IPs: apiServerIPs(), Server: true}},
		{&p.APIServerKubelet, CertSpec{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}, Client: true}},
		{&p.Admin, CertSpec{CommonName: "kubernetes-admin", Organization: []string{"system:masters"}, Client: true}},
		{&p.ControllerManager, CertSpec{CommonName: "system:kube-controller-manager", Client: true}},
		{&p.Scheduler, CertSpec{CommonName: "system:kube-scheduler", Client: true}},
		{&p.Kwok, CertSpec{CommonName: "kwok", Organization: []string{"system:masters"}, Client: true}},
	}
	for _, l := range leaves {
		kp, err := ca.Issue(l.spec, now)
		if err != nil {
			return nil, err
		}
		*l.dst = kp
	}
	if p.FrontProxyCA, err = NewCA("kubectl-tao-localcluster-front-proxy-ca", now); err != nil {
		return nil, err
	}
	if p.FrontProxyClient, err = p.FrontProxyCA.Issue(CertSpec{CommonName: FrontProxyClientName, Client: true}, now); err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate service-account key: %w", err)
	}
	saDER, err := x509.MarshalPKCS8PrivateKey(saKey)
	if err != nil {
		return nil, fmt.Errorf("marshal service-account key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, fmt.Errorf("marshal service-account public key: %w", err)
	}
	p.ServiceAccountKeyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: saDER})
	p.ServiceAccountPubPEM = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	return p, nil
}

// PKI file names inside <state>/pki.
const (
	fileCACert        = "ca.crt"
	fileCAKey         = "ca.key"
	fileAPIServerCert = "apiserver.crt"
	fileAPIServerKey  = "apiserver.key"
	fileKubeletCert   = "apiserver-kubelet-client.crt"
	fileKubeletKey    = "apiserver-kubelet-client.key"
	fileSAKey         = "sa.key"
	fileSAPub         = "sa.pub"
	fileFrontProxyCA  = "front-proxy-ca.crt"
	fileFrontProxyCrt = "front-proxy-client.crt"
	fileFrontProxyKey = "front-proxy-client.key"
)

// FrontProxyClientName is the front-proxy client certificate's CN, the one name the apiserver
// allows (--requestheader-allowed-names) to assert users through request headers.
const FrontProxyClientName = "front-proxy-client"

// WriteFiles writes the files the control-plane flags point at. Client certificates are not
// written separately: they are embedded in the kubeconfigs.
func (p *PKI) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create PKI directory: %w", err)
	}
	files := map[string][]byte{
		fileCACert:        p.CA.CertPEM,
		fileCAKey:         p.CA.KeyPEM,
		fileAPIServerCert: p.APIServer.CertPEM,
		fileAPIServerKey:  p.APIServer.KeyPEM,
		fileKubeletCert:   p.APIServerKubelet.CertPEM,
		fileKubeletKey:    p.APIServerKubelet.KeyPEM,
		fileSAKey:         p.ServiceAccountKeyPEM,
		fileSAPub:         p.ServiceAccountPubPEM,
		fileFrontProxyCA:  p.FrontProxyCA.CertPEM,
		fileFrontProxyCrt: p.FrontProxyClient.CertPEM,
		fileFrontProxyKey: p.FrontProxyClient.KeyPEM,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}
