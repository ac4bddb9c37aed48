package controllers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/vmlet/vmlet/pki"
)

// caReadTimeout bounds NodeCreds.ReadCA.
const caReadTimeout = 10 * time.Second

// MigrationTLS encrypts the migration streams between node agents: the agents' relays speak
// TLS to each other (verified both ways against the cluster's migration CA) and plaintext to
// their own node's QEMU over a unix socket in the launcher's run folder, as KubeVirt's
// virt-handler migration proxy does. QEMU never holds the node's key.
type MigrationTLS interface {
	// Server is the TLS of a target's relay: this node's certificate, and a client
	// certificate from the CA required.
	Server() (*tls.Config, error)
	// Client is the TLS of a source's relay towards a target node at addr, whose certificate
	// must carry that address.
	Client(addr netip.Addr) (*tls.Config, error)
}

// NodeCreds is a node's migration certificate, from the cluster's migration CA: the agent's
// migration relays present it (MigrationTLS). It is issued on first use and again when it
// nears its end (pki.NeedsRenewal); the key never leaves the agent's memory.
type NodeCreds struct {
	CA *pki.CA
	// ReadCA, when CA is nil, reads the CA on first use (cluster mode: a Secret the controller
	// may not have made yet when the agent starts); bounded by caReadTimeout.
	ReadCA func(ctx context.Context) (*pki.CA, error)
	Node   pki.Node // the node's name and address(es)

	mu   sync.Mutex
	pool *x509.CertPool
	cert *pki.Cert
	pair tls.Certificate
}

var _ MigrationTLS = (*NodeCreds)(nil)

// Server implements MigrationTLS.
func (c *NodeCreds) Server() (*tls.Config, error) {
	pool, err := c.caPool()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.certificate() },
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      pool,
	}, nil
}

// Client implements MigrationTLS.
func (c *NodeCreds) Client(addr netip.Addr) (*tls.Config, error) {
	pool, err := c.caPool()
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:           tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return c.certificate() },
		RootCAs:              pool,
		ServerName:           addr.String(), // an IP: verified against the certificate's IP SANs
	}, nil
}

// caPool reads the CA (once) and returns its certificate as a pool.
func (c *NodeCreds) caPool() (*x509.CertPool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pool != nil {
		return c.pool, nil
	}
	if c.CA == nil {
		if c.ReadCA == nil {
			return nil, fmt.Errorf("no migration CA")
		}
		ctx, cancel := context.WithTimeout(context.Background(), caReadTimeout)
		ca, err := c.ReadCA(ctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("read the migration CA: %w", err)
		}
		c.CA = ca
	}
	pool := x509.NewCertPool()
	pool.AddCert(c.CA.Cert)
	c.pool = pool
	return pool, nil
}

// certificate is the node's certificate, issued (again) when there is none or it nears its end.
func (c *NodeCreds) certificate() (*tls.Certificate, error) {
	if _, err := c.caPool(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cert == nil || pki.NeedsRenewal(c.cert.Cert, time.Now()) {
		cert, err := c.CA.Issue(c.Node, pki.IssueOptions{})
		if err != nil {
			return nil, fmt.Errorf("issue the node's migration certificate: %w", err)
		}
		pair, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
		if err != nil {
			return nil, fmt.Errorf("issue the node's migration certificate: %w", err)
		}
		c.cert, c.pair = cert, pair
	}
	pair := c.pair
	return &pair, nil
}
