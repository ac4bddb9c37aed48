package pki

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/vmlet/vmlet/test/prereq"
)

func TestTLSLoadOrCreateCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	ca, created, err := LoadOrCreateCA(dir, CAOptions{})
	if err != nil || !created {
		t.Fatalf("first LoadOrCreateCA = %v, created %v", err, created)
	}
	wantMode(t, dir, 0o700)
	wantMode(t, filepath.Join(dir, CAKeyFile), 0o600)
	again, created, err := LoadOrCreateCA(dir, CAOptions{})
	if err != nil || created || !again.Cert.Equal(ca.Cert) {
		t.Fatalf("second LoadOrCreateCA = %v, created %v, same %v", err, created, err == nil && again.Cert.Equal(ca.Cert))
	}
	// Half a CA is reported, never replaced.
	if err := os.Remove(filepath.Join(dir, CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateCA(dir, CAOptions{}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadOrCreateCA without the key = %v, want ErrNotExist", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, CACertFile)); !bytes.Equal(got, ca.CertPEM) {
		t.Error("the certificate was replaced")
	}
	noTemp(t, dir)
}

func TestTLSWriteQEMUCreds(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "creds")
	ca := mustCA(t, CAOptions{Now: time.Now()})
	owner := Owner{UID: os.Getuid(), GID: os.Getgid()}
	if os.Geteuid() == 0 {
		prereq.Root(t)                    // root with CAP_CHOWN (make unit runs root tests without capabilities)
		owner = Owner{UID: 107, GID: 107} // QEMU's uid here
	}
	first, written, err := EnsureNodeCreds(dir, ca, nodeA, owner, IssueOptions{})
	if err != nil || !written {
		t.Fatalf("EnsureNodeCreds = %v, written %v", err, written)
	}
	wantMode(t, dir, 0o700)
	wantOwner(t, dir, owner)
	for name, mode := range map[string]os.FileMode{QEMUCACert: 0o644, QEMUServerCert: 0o644, QEMUServerKey: 0o600, QEMUClientCert: 0o644, QEMUClientKey: 0o600} {
		p := filepath.Join(dir, name)
		wantMode(t, p, mode)
		wantOwner(t, p, owner)
	}
	for name, want := range map[string][]byte{QEMUCACert: ca.CertPEM, QEMUServerCert: first.CertPEM, QEMUClientCert: first.CertPEM, QEMUServerKey: first.KeyPEM, QEMUClientKey: first.KeyPEM} {
		if got, _ := os.ReadFile(filepath.Join(dir, name)); !bytes.Equal(got, want) {
			t.Errorf("%s does not hold what was issued", name)
		}
	}

	// Still good: kept as is.
	same, written, err := EnsureNodeCreds(dir, ca, nodeA, owner, IssueOptions{})
	if err != nil || written || !same.Cert.Equal(first.Cert) {
		t.Fatalf("second EnsureNodeCreds = %v, written %v", err, written)
	}
	// Due for renewal, renamed node, new CA: replaced as a whole (exchange over the old folder).
	for _, tc := range []struct {
		name string
		ca   *CA
		node Node
		now  time.Time
	}{
		{"renewal", ca, nodeA, time.Now().Add(70 * 24 * time.Hour)},
		{"renamed", ca, Node{Name: "node-b", Addrs: nodeA.Addrs}, time.Time{}},
		{"new ca", mustCA(t, CAOptions{Now: time.Now()}), nodeA, time.Time{}},
	} {
		c, written, err := EnsureNodeCreds(dir, tc.ca, tc.node, owner, IssueOptions{Now: tc.now})
		if err != nil || !written {
			t.Fatalf("%s: EnsureNodeCreds = %v, written %v", tc.name, err, written)
		}
		back, err := ReadQEMUCreds(dir)
		if err != nil || !back.Cert.Equal(c.Cert) {
			t.Fatalf("%s: folder holds another certificate (%v)", tc.name, err)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, QEMUCACert)); !bytes.Equal(got, tc.ca.CertPEM) {
			t.Errorf("%s: ca-cert.pem is not the new ca", tc.name)
		}
		wantMode(t, dir, 0o700)
	}
	// A certificate from another CA is refused before anything is written.
	other := mustCA(t, CAOptions{Now: time.Now()})
	if err := WriteQEMUCreds(dir, other, first, owner); !errors.Is(err, ErrNotSigned) {
		t.Errorf("WriteQEMUCreds with a foreign ca = %v, want ErrNotSigned", err)
	}
	noTemp(t, root)
}

func wantMode(t *testing.T, p string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != want {
		t.Errorf("%s mode %o, want %o", p, fi.Mode().Perm(), want)
	}
}

func wantOwner(t *testing.T, p string, want Owner) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if int(st.Uid) != want.UID || int(st.Gid) != want.GID {
		t.Errorf("%s owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, want.UID, want.GID)
	}
}

// noTemp checks no temporary file or folder is left in dir.
func noTemp(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name()[0] == '.' {
			t.Errorf("temporary %s left in %s", e.Name(), dir)
		}
	}
}
