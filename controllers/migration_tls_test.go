package controllers_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/pki"
)

// TestMigrationTLS: the relays' TLS between two nodes' creds from one CA. A node reaches the
// other at its address; a peer with a certificate from another CA is refused by the server,
// and a client checking for an address the server's certificate lacks refuses the server.
func TestMigrationTLS(t *testing.T) {
	ca, err := pki.NewCA(pki.CAOptions{CommonName: "test migration CA"})
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := pki.NewCA(pki.CAOptions{CommonName: "another CA"})
	if err != nil {
		t.Fatal(err)
	}
	ipA, ipB := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	a := &controllers.NodeCreds{CA: ca, Node: pki.Node{Name: "node-a", Addrs: []netip.Addr{ipA}}}
	b := &controllers.NodeCreds{ReadCA: func(context.Context) (*pki.CA, error) { return ca, nil },
		Node: pki.Node{Name: "node-b", Addrs: []netip.Addr{ipB}}}
	rogue := &controllers.NodeCreds{CA: foreign, Node: pki.Node{Name: "node-a", Addrs: []netip.Addr{ipA}}}

	handshake := func(client *controllers.NodeCreds, server *controllers.NodeCreds, addr netip.Addr) (clientErr, serverErr error) {
		t.Helper()
		scfg, err := server.Server()
		if err != nil {
			t.Fatal(err)
		}
		ccfg, err := client.Client(addr)
		if err != nil {
			t.Fatal(err)
		}
		c1, c2 := net.Pipe()
		defer c1.Close()
		defer c2.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			s := tls.Server(c2, scfg)
			err := s.HandshakeContext(ctx)
			if err == nil {
				// TLS 1.3: the server sees a bad client certificate after its own flight; a
				// read makes the client's refusal (its alert) arrive too.
				_, err = s.Read(make([]byte, 1))
			}
			_ = c2.Close()
			done <- err
		}()
		cl := tls.Client(c1, ccfg)
		clientErr = cl.HandshakeContext(ctx)
		if clientErr == nil {
			_, clientErr = cl.Write([]byte("x"))
		}
		_ = c1.Close()
		return clientErr, <-done
	}

	if cerr, serr := handshake(a, b, ipB); cerr != nil || serr != nil {
		t.Fatalf("node-a to node-b: client %v, server %v", cerr, serr)
	}
	if cerr, serr := handshake(b, a, ipA); cerr != nil || serr != nil {
		t.Fatalf("node-b to node-a: client %v, server %v", cerr, serr)
	}
	if _, serr := handshake(rogue, b, ipB); serr == nil || !strings.Contains(serr.Error(), "certificate") {
		t.Errorf("a client with another CA's certificate: server says %v, want a certificate error", serr)
	}
	if cerr, _ := handshake(a, b, ipA); cerr == nil || !strings.Contains(cerr.Error(), "10.0.0.1") {
		t.Errorf("a server without the address the client expects: client says %v, want a refusal naming it", cerr)
	}
	noCA := &controllers.NodeCreds{Node: pki.Node{Name: "node-c"}}
	if _, err := noCA.Server(); err == nil {
		t.Errorf("creds without a CA gave a server config")
	}
}
