package subresources

import (
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteKubeconfig writes cfg (the process's own API credentials: files or data) as a
// kubeconfig file for the delegated authentication and authorization, which read one (or the
// in-cluster config); the caller removes it.
func WriteKubeconfig(cfg *rest.Config) (string, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["api"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthority: cfg.CAFile, CertificateAuthorityData: cfg.CAData,
		InsecureSkipTLSVerify: cfg.Insecure, TLSServerName: cfg.ServerName}
	kc.AuthInfos["self"] = &clientcmdapi.AuthInfo{ClientCertificate: cfg.CertFile, ClientCertificateData: cfg.CertData,
		ClientKey: cfg.KeyFile, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken, TokenFile: cfg.BearerTokenFile}
	kc.Contexts["self"] = &clientcmdapi.Context{Cluster: "api", AuthInfo: "self"}
	kc.CurrentContext = "self"
	f, err := os.CreateTemp("", "vmlet-subresources-kubeconfig-")
	if err != nil {
		return "", fmt.Errorf("write kubeconfig: %w", err)
	}
	f.Close()
	if err := clientcmd.WriteToFile(*kc, f.Name()); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("write kubeconfig: %w", err)
	}
	return f.Name(), nil
}
