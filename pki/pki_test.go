package pki

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/netip"
	"testing"
	"time"
)

var (
	t0    = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	nodeA = Node{Name: "node-a", Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")}}
)

func mustCA(t *testing.T, o CAOptions) *CA {
	t.Helper()
	if o.Now.IsZero() {
		o.Now = t0
	}
	ca, err := NewCA(o)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestTLSIssueKeyTypes(t *testing.T) {
	for _, kt := range []KeyType{"", KeyECDSAP256, KeyRSA2048} {
		t.Run(string(kt), func(t *testing.T) {
			ca := mustCA(t, CAOptions{KeyType: kt})
			c, err := ca.Issue(nodeA, IssueOptions{KeyType: kt, Now: t0})
			if err != nil {
				t.Fatal(err)
			}
			switch kt {
			case KeyRSA2048:
				if _, ok := c.Cert.PublicKey.(*rsa.PublicKey); !ok || c.Cert.KeyUsage&x509.KeyUsageKeyEncipherment == 0 {
					t.Errorf("rsa cert: key %T usage %b", c.Cert.PublicKey, c.Cert.KeyUsage)
				}
			default:
				if _, ok := c.Cert.PublicKey.(*ecdsa.PublicKey); !ok || c.Cert.KeyUsage != x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment {
					t.Errorf("ecdsa cert: key %T usage %b", c.Cert.PublicKey, c.Cert.KeyUsage)
				}
			}
			// Verifies as a server for its name and each address, and as a client.
			pool := x509.NewCertPool()
			pool.AddCert(ca.Cert)
			for _, host := range []string{"node-a", "192.0.2.10", "2001:db8::10"} {
				if _, err := c.Cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: host, CurrentTime: t0, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
					t.Errorf("verify as server %s: %v", host, err)
				}
			}
			if _, err := c.Cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: t0, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("verify as client: %v", err)
			}
			if _, err := c.Cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "node-b", CurrentTime: t0}); err == nil {
				t.Error("verifies for another node's name")
			}
			if _, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM); err != nil {
				t.Errorf("key pair: %v", err)
			}
			// The CA round-trips through its PEM (how cluster mode keeps it in a Secret).
			back, err := ParseCA(ca.CertPEM, ca.KeyPEM)
			if err != nil || !back.Cert.Equal(ca.Cert) {
				t.Fatalf("ParseCA(PEM) = %v", err)
			}
			if err := back.CheckNode(c.Cert, nodeA, t0); err != nil {
				t.Errorf("CheckNode after PEM round trip: %v", err)
			}
		})
	}
}

func TestTLSIssueRules(t *testing.T) {
	ca := mustCA(t, CAOptions{Lifetime: 120 * 24 * time.Hour})
	for _, tc := range []struct {
		name     string
		node     Node
		o        IssueOptions
		err      error
		notAfter time.Time
	}{
		{name: "default lifetime", node: nodeA, o: IssueOptions{Now: t0}, notAfter: t0.Add(NodeLifetime)},
		{name: "capped at the ca's end", node: nodeA, o: IssueOptions{Now: t0.Add(60 * 24 * time.Hour)}, notAfter: t0.Add(120 * 24 * time.Hour)},
		{name: "ca expired", node: nodeA, o: IssueOptions{Now: t0.Add(121 * 24 * time.Hour)}, err: ErrInvalid},
		{name: "no name", node: Node{}, o: IssueOptions{Now: t0}, err: ErrInvalid},
		{name: "bad name", node: Node{Name: "a,b"}, o: IssueOptions{Now: t0}, err: ErrInvalid},
		{name: "name ends with a dash", node: Node{Name: "node-"}, o: IssueOptions{Now: t0}, err: ErrInvalid},
		{name: "zoned address", node: Node{Name: "n", Addrs: []netip.Addr{netip.MustParseAddr("fe80::1%eth0")}}, o: IssueOptions{Now: t0}, err: ErrInvalid},
		{name: "bad key type", node: nodeA, o: IssueOptions{Now: t0, KeyType: "dsa"}, err: ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ca.Issue(tc.node, tc.o)
			if !errors.Is(err, tc.err) {
				t.Fatalf("Issue = %v, want %v", err, tc.err)
			}
			if err == nil && !c.Cert.NotAfter.Equal(tc.notAfter) {
				t.Errorf("NotAfter = %s, want %s", c.Cert.NotAfter, tc.notAfter)
			}
		})
	}
}

func TestTLSNeedsRenewal(t *testing.T) {
	ca := mustCA(t, CAOptions{})
	c, err := ca.Issue(nodeA, IssueOptions{Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	life := c.Cert.NotAfter.Sub(c.Cert.NotBefore) // 90 days + backdate
	for _, tc := range []struct {
		name string
		at   time.Time
		want bool
	}{
		{"fresh", t0, false},
		{"half way", t0.Add(45 * 24 * time.Hour), false},
		{"just over a third left", c.Cert.NotAfter.Add(-life/3 - time.Minute), false},
		{"under a third left", c.Cert.NotAfter.Add(-life/3 + time.Minute), true},
		{"expired", c.Cert.NotAfter.Add(time.Hour), true},
		{"not yet valid", c.Cert.NotBefore.Add(-time.Hour), true},
	} {
		if got := NeedsRenewal(c.Cert, tc.at); got != tc.want {
			t.Errorf("%s: NeedsRenewal = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestTLSCheckNode(t *testing.T) {
	ca, other := mustCA(t, CAOptions{}), mustCA(t, CAOptions{})
	c, err := ca.Issue(nodeA, IssueOptions{Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	old := *c.Cert // as vmlet issued ECDSA certificates before QEMU 10 required key encipherment
	old.KeyUsage = x509.KeyUsageDigitalSignature
	for _, tc := range []struct {
		name string
		ca   *CA
		cert *x509.Certificate
		node Node
		at   time.Time
		err  error
	}{
		{"ok", ca, c.Cert, nodeA, t0, nil},
		{"no key encipherment", ca, &old, nodeA, t0, ErrInvalid},
		{"addresses in another order", ca, c.Cert, Node{Name: "node-a", Addrs: []netip.Addr{nodeA.Addrs[1], nodeA.Addrs[0]}}, t0, nil},
		{"another ca", other, c.Cert, nodeA, t0, ErrNotSigned},
		{"renamed", ca, c.Cert, Node{Name: "node-b", Addrs: nodeA.Addrs}, t0, ErrInvalid},
		{"address gone", ca, c.Cert, Node{Name: "node-a", Addrs: nodeA.Addrs[:1]}, t0, ErrInvalid},
		{"address added", ca, c.Cert, Node{Name: "node-a", Addrs: append([]netip.Addr{netip.MustParseAddr("192.0.2.11")}, nodeA.Addrs...)}, t0, ErrInvalid},
		{"expired", ca, c.Cert, nodeA, t0.Add(NodeLifetime + time.Hour), ErrInvalid},
	} {
		if err := tc.ca.CheckNode(tc.cert, tc.node, tc.at); !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%s: CheckNode = %v, want %v", tc.name, err, tc.err)
		}
	}
}

func TestTLSParseCARejects(t *testing.T) {
	ca, other := mustCA(t, CAOptions{}), mustCA(t, CAOptions{})
	leaf, err := ca.Issue(nodeA, IssueOptions{Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		cert, key []byte
	}{
		{"empty", nil, nil},
		{"key of another ca", ca.CertPEM, other.KeyPEM},
		{"leaf certificate", leaf.CertPEM, leaf.KeyPEM},
		{"key as cert", ca.KeyPEM, ca.KeyPEM},
		{"cert as key", ca.CertPEM, ca.CertPEM},
	} {
		if _, err := ParseCA(tc.cert, tc.key); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: ParseCA = %v, want ErrInvalid", tc.name, err)
		}
	}
}
