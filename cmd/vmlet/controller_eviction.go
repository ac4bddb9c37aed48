package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/vmlet/vmlet/controllers/casecret"
	"github.com/vmlet/vmlet/controllers/evacuation"
	"github.com/vmlet/vmlet/pki"
)

// addEvictionWebhook serves the eviction webhook (evacuation.EvictionWebhook) on addr ("" off)
// with a serving certificate from the webhook CA (Secret vmlet-system/vmlet-webhook-ca, made
// on first start), and registers it: at url when given, else at the Service of config/controller.
func addEvictionWebhook(ctx context.Context, mgr manager.Manager, addr, url string) error {
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--eviction-webhook-bind-address %q: %w", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("--eviction-webhook-bind-address %q: %w", addr, err)
	}
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return fmt.Errorf("eviction webhook client: %w", err)
	}
	ca, err := casecret.Ensure(ctx, c, client.ObjectKey{Namespace: evacuation.WebhookNamespace, Name: evacuation.WebhookCAName}, "vmlet webhook CA")
	if err != nil {
		return fmt.Errorf("eviction webhook: %w", err)
	}
	serving, err := ca.Issue(pki.Node{Name: evacuation.WebhookDNS, Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}, pki.IssueOptions{})
	if err != nil {
		return fmt.Errorf("eviction webhook serving certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(serving.CertPEM, serving.KeyPEM)
	if err != nil {
		return fmt.Errorf("eviction webhook serving certificate: %w", err)
	}
	srv := webhook.NewServer(webhook.Options{Host: host, Port: p, TLSOpts: []func(*tls.Config){func(t *tls.Config) {
		t.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }
	}}})
	srv.Register(evacuation.WebhookPath, &admission.Webhook{Handler: &evacuation.EvictionWebhook{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("vmlet-evacuation")}})
	if err := mgr.Add(srv); err != nil {
		return fmt.Errorf("add the eviction webhook: %w", err)
	}
	if err := evacuation.RegisterWebhook(ctx, c, ca.CertPEM, url); err != nil {
		return err
	}
	return nil
}
