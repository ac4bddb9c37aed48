package local

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/vmlet/vmlet/controllers/subresources"
	"github.com/vmlet/vmlet/nodeagent"
	"github.com/vmlet/vmlet/pki"
)

// The subresources API in local mode: the aggregated server runs in this process on a
// loopback port, registered with an ExternalName Service "localhost" (the embedded
// kube-apiserver has no kube-proxy: its aggregator dials https://localhost:<port>), and every
// node agent serves its VMI streams on a loopback port of its own (the nodes of one machine
// share its loopback; the aggregated server is the only client their mTLS accepts).

// frontProxyFlags are the embedded kube-apiserver's aggregation flags, with their certificates
// in the state folder.
func frontProxyFlags(stateDir string) (map[string]string, error) {
	return subresources.FrontProxyFlags(filepath.Join(stateDir, "pki", "front-proxy"))
}

// subresourceCreds loads (or creates) the subresources CA of the state folder and issues the
// aggregated server's certificates.
func subresourceCreds(stateDir string) (*subresources.Creds, error) {
	ca, _, err := pki.LoadOrCreateCA(filepath.Join(stateDir, "pki", "subresources"), pki.CAOptions{CommonName: "vmlet local subresources CA"})
	if err != nil {
		return nil, fmt.Errorf("subresources ca: %w", err)
	}
	return subresources.NewCreds(ca)
}

// nodeStreams is a node agent's stream server config on a loopback port.
func nodeStreams(creds *subresources.Creds, node string) (*nodeagent.StreamsConfig, error) {
	tc, err := creds.NodeServerTLS(node, netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for node %s streams: %w", node, err)
	}
	return &nodeagent.StreamsConfig{Listener: ln, TLS: tc}, nil
}

// addSubresources adds the aggregated server to mgr and registers it with kube-apiserver.
func (s *Stack) addSubresources(ctx context.Context, mgr manager.Manager, creds *subresources.Creds) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for the subresources api: %w", err)
	}
	direct, err := client.New(s.CP.Config, client.Options{Scheme: s.CP.Scheme})
	if err != nil {
		ln.Close()
		return fmt.Errorf("subresources api client: %w", err)
	}
	srv, err := subresources.New(subresources.Config{
		Listener: ln, ServingCertPEM: creds.Serving.CertPEM, ServingKeyPEM: creds.Serving.KeyPEM,
		Kubeconfig: s.CP.Kubeconfig, Client: direct, NodeTLS: creds.NodeTLS(),
		Recorder: mgr.GetEventRecorder("vmlet-subresources"), Log: s.cfg.Log.WithName("subresources"),
	})
	if err != nil {
		ln.Close()
		return err
	}
	if err := mgr.Add(srv); err != nil {
		return fmt.Errorf("add subresources api: %w", err)
	}
	port := int32(ln.Addr().(*net.TCPAddr).Port)
	return subresources.RegisterLocal(ctx, direct, creds.CA.CertPEM, port)
}
