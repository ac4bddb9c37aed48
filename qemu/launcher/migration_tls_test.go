package launcher_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/vmlet/vmlet/pki"
	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/test/prereq"
)

// tlsCredsDir writes a QEMU creds folder for node with a certificate from ca (removed by
// t.Cleanup). The launchers here run as root, and so does their QEMU.
func tlsCredsDir(t *testing.T, ca *pki.CA, node string) string {
	t.Helper()
	c, err := ca.Issue(pki.Node{Name: node, Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}, pki.IssueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "creds")
	if err := pki.WriteQEMUCreds(dir, ca, c, pki.Owner{UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestTLSMigration migrates between two launchers over the target's unix socket with TLS
// (tls_creds_dir on both sides, tls_hostname on the source). First against a target whose
// certificate is from another CA: the source refuses it, FinalizeMigration says
// ErrMigrationFailed, the source keeps running the guest, the target waits (killed then).
// Then against a proper target: the guest moves with its files.
func TestTLSMigration(t *testing.T) {
	src, bad, srcRec, _ := migrationPair(t, "tls")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ca, foreign := newCA(t), newCA(t)
	srcOpts := &pb.MigrationOptions{BandwidthBytesPerSec: 1 << 30, TlsCredsDir: tlsCredsDir(t, ca, "node-a"), TlsHostname: "node-b"}
	spec := mustDomain(t, src).GetLiveSpec()

	// Refused: the target presents a certificate of another CA.
	uri, err := bad.client.PrepareMigrationTarget(ctx, spec, "", &pb.MigrationOptions{TlsCredsDir: tlsCredsDir(t, foreign, "node-b")})
	if err != nil {
		t.Fatal(err)
	}
	bad.qemu = int(mustDomain(t, bad).GetPid())
	noHost := &pb.MigrationOptions{TlsCredsDir: srcOpts.TlsCredsDir}
	if err := src.client.Migrate(ctx, uri, noHost); !errors.Is(err, launcher.ErrInvalidRequest) {
		t.Errorf("Migrate over unix: with tls and no tls_hostname = %v, want ErrInvalidRequest", err)
	}
	if err := src.client.Migrate(ctx, uri, srcOpts); err != nil {
		t.Fatal(err)
	}
	if _, err := src.client.FinalizeMigration(ctx, 0); !errors.Is(err, launcher.ErrMigrationFailed) {
		t.Fatalf("finalize against a foreign target: %v, want ErrMigrationFailed", err)
	}
	st, err := src.client.GetMigrationStatus(ctx)
	if err != nil || st.GetStatus() != "failed" {
		t.Errorf("migration status %v (%v), want failed", st, err)
	}
	t.Logf("refused: %s", st.GetError())
	if d, err := src.client.GetDomain(ctx); err != nil || d.GetState() != pb.State_STATE_RUNNING {
		t.Errorf("source after the refused migration: %v %v, want RUNNING", d.GetState(), err)
	}
	if err := src.client.GuestPing(ctx); err != nil {
		t.Errorf("source guest after the refused migration: %v", err)
	}
	// Both sides refused each other (the target trusts only its own CA). A QEMU 7.2 target that
	// refuses a handshake only logs it and keeps listening: the launcher stays MIGRATING_IN
	// until told otherwise (the agent kills it, as here, or FinalizeMigration times out).
	if d, err := bad.client.GetDomain(ctx); err != nil || d.GetState() != pb.State_STATE_MIGRATING_IN {
		t.Errorf("refused target: %v %v, want MIGRATING_IN", d.GetState(), err)
	}
	if err := bad.client.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if code, err := bad.wait(ctx); err != nil || code != launcher.ExitForced {
		t.Errorf("refused target launcher exit %d (%v), want %d after Kill", code, err, launcher.ExitForced)
	}
	bad.assertClean(t)

	// Accepted: same CA on both sides.
	dst := startLauncher(t, launchOpts{})
	dstRec := watch(t, dst.client, 0)
	uri, err = dst.client.PrepareMigrationTarget(ctx, spec, "", &pb.MigrationOptions{TlsCredsDir: tlsCredsDir(t, ca, "node-b")})
	if err != nil {
		t.Fatal(err)
	}
	dst.qemu = int(mustDomain(t, dst).GetPid())
	if err := src.client.Migrate(ctx, uri, srcOpts); err != nil {
		t.Fatal(err)
	}
	if st, err := dst.client.FinalizeMigration(ctx, 0); err != nil || st.GetStatus() != "completed" {
		t.Fatalf("target finalize: %v %v", st, err)
	}
	st, err = src.client.FinalizeMigration(ctx, 0)
	if err != nil || st.GetStatus() != "completed" {
		t.Fatalf("source finalize: %v %v", st, err)
	}
	t.Logf("tls migration: total %d ms, downtime %d ms, %d bytes", st.GetTotalTimeMs(), st.GetDowntimeMs(), st.GetTransferredBytes())
	if code, err := src.wait(ctx); err != nil || code != launcher.ExitOK {
		t.Errorf("source launcher exit %d (%v), want 0 (migrated)", code, err)
	}
	if _, err := srcRec.waitEvent(ctx, 0, "source completed", isMigration("completed")); err != nil {
		t.Error(err)
	}
	src.assertClean(t)
	if _, err := dstRec.waitEvent(ctx, 0, "target agent", isAgent(true)); err != nil {
		t.Fatal(err)
	}
	r, err := dst.client.GuestExec(ctx, "/bin/cat", []string{"/tmp/mig.txt"}, nil, 0)
	if err != nil || string(r.GetStdout()) != "tls\n" {
		t.Errorf("read file after the tls migration: %q %v", r.GetStdout(), err)
	}
}

func newCA(t *testing.T) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA(pki.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// qemuUID is the uid QEMU runs as in launcher pods here (launcherpod.DefaultRunAsUser).
const qemuUID = 107

// TestTLSMigrationUnprivileged migrates over TLS between two launchers that (with their QEMU)
// run as uid 107, from creds folders pki.WriteQEMUCreds handed to that uid (folder 0700, keys
// 0600). A folder with the same files owned by root is refused by PrepareMigrationTarget, as
// QEMU cannot read it.
func TestTLSMigrationUnprivileged(t *testing.T) {
	prereq.Root(t) // to hand the files to uid 107
	ca := newCA(t)
	parent, err := os.MkdirTemp("", "vlc-") // traversable by uid 107, the creds folders are not
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	creds := func(node string, owner int) string {
		c, err := ca.Issue(pki.Node{Name: node}, pki.IssueOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(parent, node+"-"+strconv.Itoa(owner))
		if err := pki.WriteQEMUCreds(dir, ca, c, pki.Owner{UID: owner, GID: owner}); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	start := func() *proc {
		runDir, err := os.MkdirTemp("", "vl-")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(runDir, qemuUID, qemuUID); err != nil {
			t.Fatal(err)
		}
		return startLauncher(t, launchOpts{uid: qemuUID, runDir: runDir})
	}
	src := start()
	spec := guestSpec(t, "tlsuid")
	spec.Migratable = true
	for _, f := range []*string{&spec.Boot.Kernel, &spec.Boot.Initrd} {
		*f = copyFile(t, *f, filepath.Join(src.runDir, filepath.Base(*f)))
		if err := os.Chown(*f, qemuUID, qemuUID); err != nil {
			t.Fatal(err)
		}
	}
	srcRec := watch(t, src.client, 0)
	syncGuest(t, src, spec)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := srcRec.waitEvent(ctx, 0, "agent connected", isAgent(true)); err != nil {
		t.Fatal(err)
	}
	if r, err := src.client.GuestExec(ctx, "/bin/sh", []string{"-c", "echo tlsuid > /tmp/mig.txt"}, nil, 0); err != nil || r.GetExitCode() != 0 {
		t.Fatalf("write file in guest: %v %v", r, err)
	}
	live := mustDomain(t, src).GetLiveSpec()

	// Root-owned creds: QEMU (uid 107) cannot read them, the target is not prepared.
	refused := start()
	if _, err := refused.client.PrepareMigrationTarget(ctx, live, "", &pb.MigrationOptions{TlsCredsDir: creds("node-b", 0)}); !errors.Is(err, launcher.ErrQMP) {
		t.Errorf("PrepareMigrationTarget with root-owned creds = %v, want ErrQMP", err)
	} else {
		t.Logf("root-owned creds: %v", err)
	}

	dst := start()
	dstRec := watch(t, dst.client, 0)
	uri, err := dst.client.PrepareMigrationTarget(ctx, live, "", &pb.MigrationOptions{TlsCredsDir: creds("node-b", qemuUID)})
	if err != nil {
		t.Fatal(err)
	}
	dst.qemu = int(mustDomain(t, dst).GetPid())
	if err := src.client.Migrate(ctx, uri, &pb.MigrationOptions{TlsCredsDir: creds("node-a", qemuUID), TlsHostname: "node-b"}); err != nil {
		t.Fatal(err)
	}
	if st, err := dst.client.FinalizeMigration(ctx, 0); err != nil || st.GetStatus() != "completed" {
		t.Fatalf("target finalize: %v %v", st, err)
	}
	if st, err := src.client.FinalizeMigration(ctx, 0); err != nil || st.GetStatus() != "completed" {
		t.Fatalf("source finalize: %v %v", st, err)
	}
	if code, err := src.wait(ctx); err != nil || code != launcher.ExitOK {
		t.Errorf("source launcher exit %d (%v), want 0 (migrated)", code, err)
	}
	if uid := procUID(t, dst.qemu); uid != qemuUID {
		t.Errorf("target qemu runs as uid %d, want %d", uid, qemuUID)
	}
	if _, err := dstRec.waitEvent(ctx, 0, "target agent", isAgent(true)); err != nil {
		t.Fatal(err)
	}
	r, err := dst.client.GuestExec(ctx, "/bin/cat", []string{"/tmp/mig.txt"}, nil, 0)
	if err != nil || string(r.GetStdout()) != "tlsuid\n" {
		t.Errorf("read file after the tls migration: %q %v", r.GetStdout(), err)
	}
}
