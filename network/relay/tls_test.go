package relay

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmlet/vmlet/pki"
)

// tlsConfigs returns a server config requiring a client certificate from ca, and a client
// config presenting a certificate from issuer and trusting ca.
func tlsConfigs(t testing.TB, ca, issuer *pki.CA) (server, client *tls.Config) {
	t.Helper()
	pair := func(c *pki.CA, name string) tls.Certificate {
		cert, err := c.Issue(pki.Node{Name: name, Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}, pki.IssueOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	server = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair(ca, "server")},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	client = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair(issuer, "client")},
		RootCAs: pool, ServerName: "127.0.0.1"}
	return server, client
}

// TestTLSHandshakeBeforeDial: on a TLS listener, a peer is relayed only after its handshake:
// one whose certificate is from another CA is closed without a dial (what the relay feeds
// never sees it) and the handshake error is kept; a proper peer is relayed both ways.
func TestTLSHandshakeBeforeDial(t *testing.T) {
	ca, err := pki.NewCA(pki.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := pki.NewCA(pki.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv, good := tlsConfigs(t, ca, ca)
	_, bad := tlsConfigs(t, ca, foreign)

	dst := echoTCP(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int64
	r := Start(tls.NewListener(ln, srv), func(ctx context.Context) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "tcp", dst.Addr().String())
	})
	defer r.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	try := func(cfg *tls.Config) (string, error) {
		var d tls.Dialer
		d.Config = cfg
		c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return "", err
		}
		_ = c.(*tls.Conn).CloseWrite()
		b, err := io.ReadAll(c)
		return string(b), err
	}
	got, err := try(good)
	if err != nil || got != "ping" {
		t.Fatalf("a proper peer got %q, %v; want its bytes back", got, err)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("%d dials for one proper peer", n)
	}
	if got, err := try(bad); err == nil && got != "" {
		t.Fatalf("a peer with another CA's certificate got %q back", got)
	}
	// Close waits for every accepted connection's goroutine: the refusal is recorded by then
	// (its alert reaches the peer just before the relay records why).
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("the refused peer was relayed: %d dials in all", n)
	}
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "handshake") {
		t.Errorf("relay error %v, want the failed handshake", err)
	}
}
