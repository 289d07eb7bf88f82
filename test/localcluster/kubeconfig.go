package localcluster

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ClusterName is the cluster and context name in every kubeconfig the launcher writes.
const ClusterName = "kubectl-tao-local"

// RenderKubeconfig returns a self-contained kubeconfig (certificates inline) for a client
// identified by the given key pair, so the file keeps working when copied or when the PKI
// directory is gone.
func RenderKubeconfig(server string, caPEM []byte, user string, client *KeyPair) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[ClusterName] = &clientcmdapi.Cluster{
		Server:                   server,
		CertificateAuthorityData: caPEM,
	}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{
		ClientCertificateData: client.CertPEM,
		ClientKeyData:         client.KeyPEM,
	}
	cfg.Contexts[ClusterName] = &clientcmdapi.Context{
		Cluster:   ClusterName,
		AuthInfo:  user,
		Namespace: "default",
	}
	cfg.CurrentContext = ClusterName
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("render kubeconfig for %s: %w", user, err)
	}
	return out, nil
}
