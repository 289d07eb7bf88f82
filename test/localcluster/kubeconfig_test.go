package localcluster

import (
	"bytes"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

func TestRenderKubeconfig(t *testing.T) {
	p, err := NewPKI(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	data, err := RenderKubeconfig("https://127.0.0.1:43210", p.CA.CertPEM, "kubernetes-admin", p.Admin)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		t.Fatalf("rendered kubeconfig does not load: %v", err)
	}
	if cfg.CurrentContext != ClusterName {
		t.Errorf("current context = %q, want %q", cfg.CurrentContext, ClusterName)
	}
	ctx := cfg.Contexts[ClusterName]
	if ctx == nil || ctx.Cluster != ClusterName || ctx.AuthInfo != "kubernetes-admin" || ctx.Namespace != "default" {
		t.Fatalf("context = %+v", ctx)
	}
	cl := cfg.Clusters[ClusterName]
	if cl.Server != "https://127.0.0.1:43210" || !bytes.Equal(cl.CertificateAuthorityData, p.CA.CertPEM) {
		t.Errorf("cluster = %s, CA embedded %v", cl.Server, bytes.Equal(cl.CertificateAuthorityData, p.CA.CertPEM))
	}
	ai := cfg.AuthInfos["kubernetes-admin"]
	if !bytes.Equal(ai.ClientCertificateData, p.Admin.CertPEM) || !bytes.Equal(ai.ClientKeyData, p.Admin.KeyPEM) {
		t.Error("client certificate or key not embedded")
	}
	// The REST config must build from the file alone (no paths to resolve).
	rc, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://127.0.0.1:43210" {
		t.Errorf("host = %s", rc.Host)
	}
}
