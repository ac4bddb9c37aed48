package subresources

import (
	"crypto/tls"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/vmlet/vmlet/controllers/vmistream"
	"github.com/vmlet/vmlet/pki"
)

// Where the APIService sends kube-apiserver: Service ServiceName in ServiceNamespace (its
// serving certificate names ServiceDNS).
const (
	ServiceNamespace = "vmlet-system"
	ServiceName      = "vmlet-subresources"
	ServiceDNS       = ServiceName + "." + ServiceNamespace + ".svc"
	APIServiceName   = Version + "." + Group
)

// Creds are the subresources API's certificates, all from one CA (the APIService's caBundle,
// and the node agents' trust): the server's serving certificate (DNS ServiceDNS) and its client
// certificate for the node agents (vmistream.ClientName).
type Creds struct {
	CA         *pki.CA
	Serving    *pki.Cert
	NodeClient *pki.Cert
}

// NewCreds issues the server's certificates from ca.
func NewCreds(ca *pki.CA) (*Creds, error) {
	serving, err := ca.Issue(pki.Node{Name: ServiceDNS, Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}, pki.IssueOptions{})
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	nc, err := ca.Issue(pki.Node{Name: vmistream.ClientName}, pki.IssueOptions{})
	if err != nil {
		return nil, fmt.Errorf("node client certificate: %w", err)
	}
	return &Creds{CA: ca, Serving: serving, NodeClient: nc}, nil
}

// NodeTLS is the client TLS to node agents.
func (c *Creds) NodeTLS() NodeTLS {
	return NodeTLS{CAPEM: c.CA.CertPEM, CertPEM: c.NodeClient.CertPEM, KeyPEM: c.NodeClient.KeyPEM}
}

// NodeServerTLS issues node's stream server certificate (DNS node, IP addrs) and returns its
// server TLS (vmistream.ServerTLS: only NodeClient is accepted).
func (c *Creds) NodeServerTLS(node string, addrs ...netip.Addr) (*tls.Config, error) {
	cert, err := c.CA.Issue(pki.Node{Name: node, Addrs: addrs}, pki.IssueOptions{})
	if err != nil {
		return nil, fmt.Errorf("node %s stream certificate: %w", node, err)
	}
	return vmistream.ServerTLS(c.CA.CertPEM, cert.CertPEM, cert.KeyPEM)
}

// FrontProxyName is the common name of kube-apiserver's proxy client certificate
// (--requestheader-allowed-names).
const FrontProxyName = "front-proxy-client"

// FrontProxyFlags creates (in dir) a front-proxy CA and kube-apiserver's proxy client
// certificate, and returns the kube-apiserver flags that turn the aggregation layer on with
// them: --requestheader-* (which aggregated servers read from the configmap
// kube-system/extension-apiserver-authentication) and --proxy-client-cert/key-file.
func FrontProxyFlags(dir string) (map[string]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("front proxy: %w", err)
	}
	ca, _, err := pki.LoadOrCreateCA(dir, pki.CAOptions{CommonName: "vmlet front-proxy CA"})
	if err != nil {
		return nil, fmt.Errorf("front proxy ca: %w", err)
	}
	cert, err := ca.Issue(pki.Node{Name: FrontProxyName}, pki.IssueOptions{})
	if err != nil {
		return nil, fmt.Errorf("front proxy client certificate: %w", err)
	}
	files := map[string][]byte{"front-proxy-ca.crt": ca.CertPEM, "proxy-client.crt": cert.CertPEM, "proxy-client.key": cert.KeyPEM}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, fmt.Errorf("front proxy: %w", err)
		}
	}
	return map[string]string{
		"requestheader-client-ca-file":       filepath.Join(dir, "front-proxy-ca.crt"),
		"requestheader-allowed-names":        FrontProxyName,
		"requestheader-username-headers":     "X-Remote-User",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"proxy-client-cert-file":             filepath.Join(dir, "proxy-client.crt"),
		"proxy-client-key-file":              filepath.Join(dir, "proxy-client.key"),
	}, nil
}
