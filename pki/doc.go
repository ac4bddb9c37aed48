// Package pki owns the certificates that encrypt traffic between vmlet nodes: a certificate
// authority vmlet creates and keeps, one certificate per node signed by it, and the folder of
// PEM files QEMU's tls-creds-x509 object reads (the migration stream and the NBD disk copy).
//
// The pure parts (NewCA, ParseCA, CA.Issue, NeedsRenewal, CheckNode) work on PEM bytes, so the
// CA can live in a folder (LoadOrCreateCA, local mode: under the state folder) or in a
// Kubernetes Secret (cluster mode: the caller reads and writes the bytes; this package imports
// no Kubernetes package). WriteQEMUCreds and EnsureNodeCreds are the thin file-system side.
//
// Keys are ECDSA P-256 by default (QEMU 7.2 with GnuTLS 3.7 accepts them; see qemu/tls_test.go),
// RSA-2048 on request (KeyRSA2048) for peers that cannot do ECDSA.
//
// Lifetimes and renewal: the CA lives CALifetime (10 years), a node certificate
// NodeLifetime (90 days) and never past its CA. NeedsRenewal says a certificate is due once
// less than a third of its lifetime is left (30 days for a node certificate), or when it was
// not signed by the current CA, or does not name the node's current name and addresses.
// EnsureNodeCreds applies that rule each time it is called (at agent start and before each
// migration). CA rotation is not automatic: CA.ExpiresWithin tells the caller when to plan one.
package pki
