package main

import (
	"context"
	"fmt"
	"net"
	"os"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/vmlet/vmlet/controllers/subresources"
)

// addSubresources serves the subresources API in the controller on addr ("" off): the CA in
// its Secret (made on first start), its certificate in the APIService's caBundle and in the
// ConfigMap the node agents read.
func addSubresources(ctx context.Context, mgr manager.Manager, addr string) error {
	if addr == "" {
		return nil
	}
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return fmt.Errorf("subresources api client: %w", err)
	}
	ca, err := subresources.EnsureClusterCA(ctx, c)
	if err != nil {
		return err
	}
	creds, err := subresources.NewCreds(ca)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen for the subresources api: %w", err)
	}
	// The delegated authn/authz read a kubeconfig: the controller's own credentials.
	kc, err := subresources.WriteKubeconfig(mgr.GetConfig())
	if err != nil {
		ln.Close()
		return err
	}
	defer os.Remove(kc) // read by New
	srv, err := subresources.New(subresources.Config{
		Listener: ln, ServingCertPEM: creds.Serving.CertPEM, ServingKeyPEM: creds.Serving.KeyPEM,
		Kubeconfig: kc, Client: c, NodeTLS: creds.NodeTLS(), Recorder: mgr.GetEventRecorder("vmlet-subresources"),
	})
	if err != nil {
		ln.Close()
		return err
	}
	if err := subresources.RegisterCluster(ctx, c, ca.CertPEM); err != nil {
		ln.Close()
		return err
	}
	if err := mgr.Add(srv); err != nil {
		return fmt.Errorf("add subresources api: %w", err)
	}
	return nil
}
