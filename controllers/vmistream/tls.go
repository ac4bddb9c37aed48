package vmistream

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// ClientName is the common name of the aggregated server's client certificate, the only
// client this server accepts.
const ClientName = "vmlet-subresources"

// ServerTLS is the server's TLS: its certificate, and client certificates required, signed by
// caPEM and named ClientName (a node's own certificate from the same CA is refused).
func ServerTLS(caPEM, certPEM, keyPEM []byte) (*tls.Config, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("vmi streams tls: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("vmi streams tls: no ca certificate")
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || cs.PeerCertificates[0].Subject.CommonName != ClientName {
				return fmt.Errorf("vmi streams tls: client is not %s", ClientName)
			}
			return nil
		},
		NextProtos: []string{"http/1.1"}, // websockets upgrade over HTTP/1.1
	}, nil
}
