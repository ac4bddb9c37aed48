package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"time"
)

// Errors.
var (
	// ErrInvalid: bad options or PEM data.
	ErrInvalid = errors.New("invalid pki input")
	// ErrNotSigned: a certificate was not signed by the CA at hand.
	ErrNotSigned = errors.New("certificate not signed by this ca")
)

// KeyType is the kind of private key generated.
type KeyType string

// Key types.
const (
	KeyECDSAP256 KeyType = "ecdsa-p256" // default
	KeyRSA2048   KeyType = "rsa-2048"
)

// Lifetimes (see the package doc for the renewal rule).
const (
	CALifetime   = 10 * 365 * 24 * time.Hour
	NodeLifetime = 90 * 24 * time.Hour
	// backdate is how far NotBefore lies in the past, for clocks of peers slightly behind.
	backdate = 5 * time.Minute
)

// CA is a certificate authority: its certificate and signing key, with their PEM forms.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte // "CERTIFICATE"
	KeyPEM  []byte // "PRIVATE KEY" (PKCS #8)
}

// CAOptions shape NewCA. Zero values take the defaults.
type CAOptions struct {
	CommonName string        // default "vmlet-ca"
	KeyType    KeyType       // default KeyECDSAP256
	Lifetime   time.Duration // default CALifetime
	Now        time.Time     // default time.Now()
}

// NewCA creates a self-signed CA (basic constraints CA:TRUE, path length 0, usage cert sign
// and CRL sign). Equivalent to `certtool --generate-self-signed` with `ca` and `cert_signing_key`.
func NewCA(o CAOptions) (*CA, error) {
	if o.CommonName == "" {
		o.CommonName = "vmlet-ca"
	}
	if o.Lifetime <= 0 {
		o.Lifetime = CALifetime
	}
	now := nowOr(o.Now)
	key, err := newKey(o.KeyType)
	if err != nil {
		return nil, fmt.Errorf("create ca: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: o.CommonName, Organization: []string{"vmlet"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(o.Lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := sign(tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create ca: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, fmt.Errorf("create ca: %w", err)
	}
	return ParseCA(pemBlock("CERTIFICATE", der), keyPEM)
}

// ParseCA reads a CA from its PEM certificate and key (as NewCA or CA.CertPEM/KeyPEM wrote
// them, or "EC PRIVATE KEY"/"RSA PRIVATE KEY" keys) and checks that they belong together and
// that the certificate is a CA.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("parse ca: %w", err)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("parse ca: %w: certificate %q is not a ca", ErrInvalid, cert.Subject.CommonName)
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("parse ca: %w", err)
	}
	if !publicKeyEqual(cert.PublicKey, key.Public()) {
		return nil, fmt.Errorf("parse ca: %w: key does not match the certificate", ErrInvalid)
	}
	return &CA{Cert: cert, Key: key, CertPEM: bytes.Clone(certPEM), KeyPEM: bytes.Clone(keyPEM)}, nil
}

// ExpiresWithin reports whether the CA's certificate ends less than d after now.
func (ca *CA) ExpiresWithin(now time.Time, d time.Duration) bool {
	return ca.Cert.NotAfter.Before(now.Add(d))
}

// Node names a node: the name and the addresses its peers reach it at.
type Node struct {
	Name  string       // DNS SAN and common name, e.g. the Kubernetes node name
	Addrs []netip.Addr // IP SANs
}

// Cert is an issued certificate and its key.
type Cert struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// IssueOptions shape CA.Issue. Zero values take the defaults.
type IssueOptions struct {
	KeyType  KeyType       // default KeyECDSAP256
	Lifetime time.Duration // default NodeLifetime; never past the CA's end
	Now      time.Time     // default time.Now()
}

// Issue creates a node certificate signed by ca, valid as a TLS server and as a TLS client
// (QEMU's migration source is a client, the target a server, and every node is both), with
// SAN DNS:node.Name and IP:each address.
func (ca *CA) Issue(node Node, o IssueOptions) (*Cert, error) {
	if err := node.validate(); err != nil {
		return nil, fmt.Errorf("issue certificate: %w", err)
	}
	if o.Lifetime <= 0 {
		o.Lifetime = NodeLifetime
	}
	now := nowOr(o.Now)
	notAfter := now.Add(o.Lifetime)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	if !notAfter.After(now) {
		return nil, fmt.Errorf("issue certificate: %w: the ca expired at %s", ErrInvalid, ca.Cert.NotAfter.Format(time.RFC3339))
	}
	key, err := newKey(o.KeyType)
	if err != nil {
		return nil, fmt.Errorf("issue certificate: %w", err)
	}
	// Key encipherment is meaningless for an ECDSA key, but QEMU (10.0; crypto/tlscredsx509.c)
	// refuses a certificate whose critical key usage lacks it ("usage does not permit key
	// encipherment"), and Go always marks key usage critical.
	usage := x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: node.Name, Organization: []string{"vmlet"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              usage,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		DNSNames:              []string{node.Name},
		AuthorityKeyId:        ca.Cert.SubjectKeyId,
	}
	for _, a := range node.Addrs {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(a.Unmap().AsSlice()))
	}
	der, err := sign(tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("issue certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, fmt.Errorf("issue certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("issue certificate: %w", err)
	}
	return &Cert{Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: keyPEM}, nil
}

// CheckNode returns nil if cert was signed by ca, is valid at now and names exactly node's
// name and addresses; otherwise why not (ErrNotSigned for another CA).
func (ca *CA) CheckNode(cert *x509.Certificate, node Node, now time.Time) error {
	if err := cert.CheckSignatureFrom(ca.Cert); err != nil {
		return fmt.Errorf("check certificate: %w: %w", ErrNotSigned, err)
	}
	if now.Before(cert.NotBefore) || !now.Before(cert.NotAfter) {
		return fmt.Errorf("check certificate: %w: valid %s to %s", ErrInvalid, cert.NotBefore.Format(time.RFC3339), cert.NotAfter.Format(time.RFC3339))
	}
	if !slices.Equal(cert.DNSNames, []string{node.Name}) {
		return fmt.Errorf("check certificate: %w: names %v, want %s", ErrInvalid, cert.DNSNames, node.Name)
	}
	// Certificates vmlet issued before QEMU 10 lack key encipherment, which QEMU 10 requires:
	// they are issued again.
	if need := x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment; cert.KeyUsage&need != need {
		return fmt.Errorf("check certificate: %w: key usage %b lacks digital signature or key encipherment", ErrInvalid, cert.KeyUsage)
	}
	var have, want []netip.Addr
	for _, ip := range cert.IPAddresses {
		a, _ := netip.AddrFromSlice(ip)
		have = append(have, a.Unmap())
	}
	for _, a := range node.Addrs {
		want = append(want, a.Unmap())
	}
	cmp := func(a, b netip.Addr) int { return a.Compare(b) }
	slices.SortFunc(have, cmp)
	slices.SortFunc(want, cmp)
	if !slices.Equal(have, slices.Compact(want)) {
		return fmt.Errorf("check certificate: %w: addresses %v, want %v", ErrInvalid, have, want)
	}
	return nil
}

// NeedsRenewal reports whether cert is due for renewal at now: less than a third of its
// lifetime left (or already expired or not yet valid).
func NeedsRenewal(cert *x509.Certificate, now time.Time) bool {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return now.Before(cert.NotBefore) || cert.NotAfter.Sub(now) < life/3
}

// nodeNameRe is a DNS name (a Kubernetes node name).
var nodeNameRe = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`)

func (n Node) validate() error {
	if len(n.Name) > 253 || !nodeNameRe.MatchString(n.Name) {
		return fmt.Errorf("%w: node name %q: 1-253 letters, digits, '-' and '.', starting and ending with a letter or digit", ErrInvalid, n.Name)
	}
	for _, a := range n.Addrs {
		if !a.IsValid() || a.Zone() != "" {
			return fmt.Errorf("%w: node address %q", ErrInvalid, a)
		}
	}
	return nil
}

// ParseCert reads the first certificate of a PEM bundle.
func ParseCert(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: no PEM CERTIFICATE block", ErrInvalid)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return c, nil
}

// ParseKey reads a PEM private key: PKCS #8 "PRIVATE KEY", "EC PRIVATE KEY" or
// "RSA PRIVATE KEY".
func ParseKey(keyPEM []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return nil, fmt.Errorf("%w: no PEM key block", ErrInvalid)
	}
	var k any
	var err error
	switch b.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(b.Bytes)
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(b.Bytes)
	default:
		return nil, fmt.Errorf("%w: PEM block %q is not a private key", ErrInvalid, b.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%w: key type %T", ErrInvalid, k)
	}
	return s, nil
}

func newKey(t KeyType) (crypto.Signer, error) {
	switch t {
	case "", KeyECDSAP256:
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case KeyRSA2048:
		return rsa.GenerateKey(rand.Reader, 2048)
	}
	return nil, fmt.Errorf("%w: key type %q", ErrInvalid, t)
}

// sign fills the serial number and subject key id and signs tmpl.
func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial.Add(serial, big.NewInt(1)) // positive, never 0
	spki, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	id := sha256.Sum256(spki)
	tmpl.SubjectKeyId = id[:20]
	return x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
}

func encodeKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pemBlock("PRIVATE KEY", der), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func publicKeyEqual(a, b crypto.PublicKey) bool {
	e, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && e.Equal(b)
}

func nowOr(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}
