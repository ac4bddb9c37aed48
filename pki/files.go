package pki

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// File names in a CA folder (LoadOrCreateCA).
const (
	CACertFile = "ca-cert.pem"
	CAKeyFile  = "ca-key.pem"
)

// File names QEMU's tls-creds-x509 object reads from its dir (QEMU docs/system/tls.rst):
// the CA for verifying the peer, the server pair (endpoint=server) and the client pair
// (endpoint=client). vmlet writes the node's one certificate as both pairs.
const (
	QEMUCACert     = "ca-cert.pem"
	QEMUServerCert = "server-cert.pem"
	QEMUServerKey  = "server-key.pem"
	QEMUClientCert = "client-cert.pem"
	QEMUClientKey  = "client-key.pem"
)

// Owner is who owns a written folder and its files (QEMU's uid and gid, 107 here).
type Owner struct{ UID, GID int }

// LoadOrCreateCA reads the CA from dir (ca-cert.pem, ca-key.pem) or, when neither file exists,
// creates one with o and writes it there (folder 0700, key 0600, owned by the caller, each file
// written to a temporary name and renamed). One file without the other is an error: it is
// never silently replaced. Equivalent to the first steps of `certtool --generate-self-signed`
// kept in dir.
func LoadOrCreateCA(dir string, o CAOptions) (ca *CA, created bool, err error) {
	certPEM, cerr := os.ReadFile(filepath.Join(dir, CACertFile))
	keyPEM, kerr := os.ReadFile(filepath.Join(dir, CAKeyFile))
	switch {
	case cerr == nil && kerr == nil:
		ca, err := ParseCA(certPEM, keyPEM)
		if err != nil {
			return nil, false, fmt.Errorf("load ca from %s: %w", dir, err)
		}
		return ca, false, nil
	case !errors.Is(cerr, fs.ErrNotExist) || !errors.Is(kerr, fs.ErrNotExist):
		return nil, false, fmt.Errorf("load ca from %s: %w", dir, errors.Join(cerr, kerr))
	}
	ca, err = NewCA(o)
	if err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("write ca: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("write ca: %w", err)
	}
	// The key goes last: a crash in between leaves only the certificate, which the next call
	// reports instead of creating a second CA that already-issued certificates do not chain to.
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{{CACertFile, ca.CertPEM, 0o644}, {CAKeyFile, ca.KeyPEM, 0o600}} {
		if err := writeFileAtomic(filepath.Join(dir, f.name), f.data, f.mode, nil); err != nil {
			return nil, false, fmt.Errorf("write ca: %w", err)
		}
	}
	return ca, true, nil
}

// WriteQEMUCreds writes the QEMU x509 creds folder dir for the node certificate cert signed by
// ca: ca-cert.pem, server-cert.pem, server-key.pem, client-cert.pem, client-key.pem, the folder
// 0700 and the keys 0600, all owned by owner. It builds the whole folder under a temporary name
// next to dir and swaps it in with one rename (renameat2 RENAME_EXCHANGE when dir exists), so a
// reader (QEMU's object-add) sees either the old set or the new one, never a mix.
func WriteQEMUCreds(dir string, ca *CA, cert *Cert, owner Owner) error {
	if err := ca.checkSigned(cert); err != nil {
		return fmt.Errorf("write qemu creds: %w", err)
	}
	dir = filepath.Clean(dir)
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("write qemu creds: %w", err)
	}
	defer os.RemoveAll(tmp) // after the exchange it holds the old set
	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{QEMUCACert, ca.CertPEM, 0o644},
		{QEMUServerCert, cert.CertPEM, 0o644},
		{QEMUServerKey, cert.KeyPEM, 0o600},
		{QEMUClientCert, cert.CertPEM, 0o644},
		{QEMUClientKey, cert.KeyPEM, 0o600},
	}
	for _, f := range files {
		if err := writeFileAtomic(filepath.Join(tmp, f.name), f.data, f.mode, &owner); err != nil {
			return fmt.Errorf("write qemu creds: %w", err)
		}
	}
	if err := os.Chmod(tmp, 0o700); err != nil {
		return fmt.Errorf("write qemu creds: %w", err)
	}
	if err := os.Lchown(tmp, owner.UID, owner.GID); err != nil {
		return fmt.Errorf("write qemu creds: %w", err)
	}
	if err := syncDir(tmp); err != nil {
		return fmt.Errorf("write qemu creds: %w", err)
	}
	err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.ENOENT) {
		err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_NOREPLACE)
	}
	if err != nil {
		return fmt.Errorf("write qemu creds: swap %s in: %w", dir, err)
	}
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return fmt.Errorf("write qemu creds: %w", err)
	}
	return nil
}

// ReadQEMUCreds reads the node certificate back from a creds folder WriteQEMUCreds wrote.
func ReadQEMUCreds(dir string) (*Cert, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, QEMUServerCert))
	if err != nil {
		return nil, fmt.Errorf("read qemu creds: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, QEMUServerKey))
	if err != nil {
		return nil, fmt.Errorf("read qemu creds: %w", err)
	}
	c, err := ParseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("read qemu creds: %w", err)
	}
	return &Cert{Cert: c, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// EnsureNodeCreds makes dir a valid creds folder for node: it keeps the certificate there if
// ca signed it, it names node exactly, and NeedsRenewal says no; otherwise it issues a new one
// and writes the folder (WriteQEMUCreds). It reports whether it wrote. The ca-cert.pem in dir
// is rewritten with it, so a folder from another CA is replaced as a whole.
func EnsureNodeCreds(dir string, ca *CA, node Node, owner Owner, o IssueOptions) (cert *Cert, written bool, err error) {
	now := nowOr(o.Now)
	if c, err := ReadQEMUCreds(dir); err == nil && ca.CheckNode(c.Cert, node, now) == nil && !NeedsRenewal(c.Cert, now) {
		if caPEM, err := os.ReadFile(filepath.Join(dir, QEMUCACert)); err == nil && string(caPEM) == string(ca.CertPEM) {
			return c, false, nil
		}
	}
	cert, err = ca.Issue(node, o)
	if err != nil {
		return nil, false, err
	}
	if err := WriteQEMUCreds(dir, ca, cert, owner); err != nil {
		return nil, false, err
	}
	return cert, true, nil
}

func (ca *CA) checkSigned(c *Cert) error {
	if err := c.Cert.CheckSignatureFrom(ca.Cert); err != nil {
		return fmt.Errorf("%w: %w", ErrNotSigned, err)
	}
	key, err := ParseKey(c.KeyPEM)
	if err != nil {
		return err
	}
	if !publicKeyEqual(c.Cert.PublicKey, key.Public()) {
		return fmt.Errorf("%w: key does not match the certificate", ErrInvalid)
	}
	return nil
}

// writeFileAtomic writes data to path.tmp-*, sets mode (and owner), syncs, and renames it over path.
func writeFileAtomic(path string, data []byte, mode os.FileMode, owner *Owner) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if owner != nil {
		if err := f.Chown(owner.UID, owner.GID); err != nil {
			return err
		}
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
