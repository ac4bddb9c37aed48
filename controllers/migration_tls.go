package controllers

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/vmlet/vmlet/pki"
)

// caReadTimeout bounds NodeCreds.ReadCA.
const caReadTimeout = 10 * time.Second

// migrationCredsDir is the QEMU x509 creds folder in a launcher's run folder.
const migrationCredsDir = "migration-tls"

// NodeCreds is a node's migration certificate, from the cluster's migration CA, which it
// writes into the run folder of each launcher that migrates (MigrationNet.TLS): QEMU verifies
// its peer against the CA both ways, and the source checks that the target's certificate
// carries the target node's address. It is issued on first use and again when it nears its
// end (pki.NeedsRenewal).
type NodeCreds struct {
	CA *pki.CA
	// ReadCA, when CA is nil, reads the CA on first use (cluster mode: a Secret the controller
	// may not have made yet when the agent starts); bounded by caReadTimeout.
	ReadCA func(ctx context.Context) (*pki.CA, error)
	Node   pki.Node  // the node's name and address(es)
	Owner  pki.Owner // the launchers' user: QEMU reads the folder

	mu   sync.Mutex
	cert *pki.Cert
}

// Write writes the creds into runDir and returns their folder.
func (c *NodeCreds) Write(runDir string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.CA == nil {
		if c.ReadCA == nil {
			return "", fmt.Errorf("no migration CA")
		}
		ctx, cancel := context.WithTimeout(context.Background(), caReadTimeout)
		ca, err := c.ReadCA(ctx)
		cancel()
		if err != nil {
			return "", fmt.Errorf("read the migration CA: %w", err)
		}
		c.CA = ca
	}
	if c.cert == nil || pki.NeedsRenewal(c.cert.Cert, time.Now()) {
		cert, err := c.CA.Issue(c.Node, pki.IssueOptions{})
		if err != nil {
			return "", fmt.Errorf("issue the node's migration certificate: %w", err)
		}
		c.cert = cert
	}
	dir := filepath.Join(runDir, migrationCredsDir)
	if err := pki.WriteQEMUCreds(dir, c.CA, c.cert, c.Owner); err != nil {
		return "", err
	}
	return dir, nil
}
