package launcher_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/test/testguest"
)

// localDisks are fresh node-local disks as the agent creates them on each node: "ovl", a
// qcow2 overlay over the shared data disk (a containerDisk), and "scratch", a 64 MiB raw
// emptyDisk. The guest sees them as vda and vdb.
func localDisks(t *testing.T) []*pb.Disk {
	t.Helper()
	raw := filepath.Join(t.TempDir(), "scratch.raw")
	if err := os.WriteFile(raw, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(raw, 64<<20); err != nil {
		t.Fatal(err)
	}
	return []*pb.Disk{
		{Id: "ovl", Path: testguest.Overlay(t, testguest.Assets(t).DataDisk), Format: "qcow2"},
		{Id: "scratch", Path: raw, Format: "raw"},
	}
}

var mirrorDisks = []*pb.MirrorDisk{{Id: "ovl", Shallow: true}, {Id: "scratch"}}

// diskMigration boots a guest with local disks on a source launcher and prepares a target
// launcher that receives them into files of its own. It returns the target's prepare answer.
func diskMigration(t *testing.T, name string, opts *pb.MigrationOptions) (src, dst *proc, srcRec, dstRec *recorder, srcDisks []*pb.Disk, prep *pb.PrepareMigrationTargetResponse) {
	t.Helper()
	src = startLauncher(t, launchOpts{})
	dst = startLauncher(t, launchOpts{})
	srcRec, dstRec = watch(t, src.client, 0), watch(t, dst.client, 0)
	spec := guestSpec(t, name)
	spec.Migratable = true
	spec.Disks = localDisks(t)
	syncGuest(t, src, spec)
	ctx, cancel := context.WithTimeout(context.Background(), bootDeadline)
	defer cancel()
	if _, err := srcRec.waitEvent(ctx, 0, "agent connected", isAgent(true)); err != nil {
		t.Fatal(err)
	}
	live := mustDomain(t, src).GetLiveSpec()
	fresh := localDisks(t)
	for i, d := range live.GetDisks() {
		d.Path = fresh[i].GetPath()
	}
	prep, err := dst.client.PrepareMigrationTargetWith(ctx, &pb.PrepareMigrationTargetRequest{
		Spec: live, Options: opts, ReceiveDisks: []string{"ovl", "scratch"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "unix:" + dst.paths.NBDSocket(); prep.GetNbdUri() != want {
		t.Errorf("nbd uri %q, want %q", prep.GetNbdUri(), want)
	}
	dst.qemu = int(mustDomain(t, dst).GetPid())
	return src, dst, srcRec, dstRec, spec.GetDisks(), prep
}

// TestMigrationLocalDisks migrates a guest whose disks are node-local between two launchers,
// each with its own copies: Migrate mirrors the disks, the guest writes markers to its
// emptyDisk and its overlay while the memory migration runs (16 MiB/s), the target stays
// paused after its FinalizeMigration, the source's FinalizeMigration ends the mirrors before
// QEMU quits (its QMP log shows the NBD nodes removed before quit; the launcher exits 0,
// reason migrated), and after ResumeMigrationTarget the guest reads both markers from the
// target's disks (page cache dropped) and the target's emptyDisk file holds the marker.
func TestMigrationLocalDisks(t *testing.T) {
	opts := &pb.MigrationOptions{BandwidthBytesPerSec: 16 << 20}
	src, dst, srcRec, dstRec, _, prep := diskMigration(t, "blockmig", opts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	err := src.client.MigrateWith(ctx, &pb.MigrateRequest{Uri: prep.GetUri(), Options: opts, NbdUri: prep.GetNbdUri(), MirrorDisks: mirrorDisks})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mirrors ready and migration started after %s", time.Since(start))
	marker := fmt.Sprintf("MARKER-%d", time.Now().UnixNano())
	for _, cmd := range []string{
		"printf " + marker + " | dd of=/dev/vdb conv=fsync 2>/dev/null",
		"printf " + marker + " | dd of=/dev/vda bs=1M seek=1 conv=fsync 2>/dev/null",
	} {
		if r, err := src.client.GuestExec(ctx, "/bin/sh", []string{"-c", cmd}, nil, 0); err != nil || r.GetExitCode() != 0 {
			t.Fatalf("guest write %q: %v %v", cmd, r, err)
		}
	}
	st, err := src.client.GetMigrationStatus(ctx)
	if err != nil || st.GetStatus() != "active" {
		t.Fatalf("migration status %v (%v) after the guest wrote: the writes were not made during the migration", st, err)
	}
	if len(st.GetDisks()) != 2 || !st.GetDisks()[0].GetReady() || st.GetDisks()[1].GetTotalBytes() < 64<<20 {
		t.Errorf("disk mirror status %v, want both ready, scratch 64 MiB", st.GetDisks())
	}
	tst, err := dst.client.FinalizeMigration(ctx, 0)
	if err != nil || tst.GetStatus() != "completed" {
		t.Fatalf("target finalize: %v %v", tst, err)
	}
	if d := mustDomain(t, dst); d.GetState() == pb.State_STATE_RUNNING {
		t.Fatalf("target runs before the source ended its mirrors")
	}
	sst, err := src.client.FinalizeMigration(ctx, 0)
	if err != nil || sst.GetStatus() != "completed" {
		t.Fatalf("source finalize: %v %v", sst, err)
	}
	t.Logf("migration with mirrored disks: total %d ms, downtime %d ms, disks %v", sst.GetTotalTimeMs(), sst.GetDowntimeMs(), sst.GetDisks())
	if code, err := src.wait(ctx); err != nil || code != launcher.ExitOK {
		t.Errorf("source launcher exit %d (%v), want 0 (migrated)", code, err)
	}
	if _, err := srcRec.waitEvent(ctx, 0, "migrated", func(e *pb.Event) bool {
		return isState(pb.State_STATE_SHUTOFF)(e) && e.GetLifecycle().GetReason() == "migrated"
	}); err != nil {
		t.Error(err)
	}
	assertBefore(t, src.paths.QMPLog(), `"blockdev-del"`, `"quit"`)
	src.assertClean(t)

	if err := dst.client.ResumeMigrationTarget(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, err := dstRec.waitEvent(ctx, 0, "target running", isState(pb.State_STATE_RUNNING)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dst.paths.NBDSocket()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("nbd socket after ResumeMigrationTarget: %v", err)
	}
	if _, err := dstRec.waitEvent(ctx, 0, "target agent", isAgent(true)); err != nil {
		t.Fatal(err)
	}
	read := func(cmd string) string {
		r, err := dst.client.GuestExec(ctx, "/bin/sh", []string{"-c", cmd}, nil, 0)
		if err != nil || r.GetExitCode() != 0 {
			t.Fatalf("guest %q: %v %v", cmd, r, err)
		}
		return string(r.GetStdout())
	}
	read("echo 3 > /proc/sys/vm/drop_caches")
	if got := read(fmt.Sprintf("head -c %d /dev/vdb", len(marker))); got != marker {
		t.Errorf("target emptyDisk reads %q, want %q", got, marker)
	}
	if got := read(fmt.Sprintf("dd if=/dev/vda bs=1M skip=1 count=1 2>/dev/null | head -c %d", len(marker))); got != marker {
		t.Errorf("target overlay reads %q at 1 MiB, want %q", got, marker)
	}
	if got := read("head -c 15 /dev/vda"); got != testguest.DataDiskLabel {
		t.Errorf("target overlay reads %q, want the backing image's label", got)
	}
	live := mustDomain(t, dst).GetLiveSpec()
	if b, err := os.ReadFile(live.GetDisks()[1].GetPath()); err != nil || !bytes.HasPrefix(b, []byte(marker)) {
		t.Errorf("target's emptyDisk file does not start with the marker (%v)", err)
	}
}

// TestMigrationLocalDisksCancel refuses bad mirror requests (post-copy, a tcp nbd uri, an
// unknown disk) without side effects, then aborts a migration with mirrored disks (1 MiB/s):
// CancelMigration cancels the memory migration and the mirrors; the source keeps running on
// its own disks, whose files are byte for byte what they were, and reports no mirrors; the
// target's QEMU gives up.
func TestMigrationLocalDisksCancel(t *testing.T) {
	opts := &pb.MigrationOptions{BandwidthBytesPerSec: 1 << 20}
	src, dst, srcRec, _, disks, prep := diskMigration(t, "blockmig-cancel", opts)
	before := sums(t, disks)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, bad := range []*pb.MigrateRequest{
		{Uri: prep.GetUri(), Options: &pb.MigrationOptions{Postcopy: true}, NbdUri: prep.GetNbdUri(), MirrorDisks: mirrorDisks},
		{Uri: prep.GetUri(), Options: opts, NbdUri: "tcp:127.0.0.1:1", MirrorDisks: mirrorDisks},
		{Uri: prep.GetUri(), Options: opts, NbdUri: prep.GetNbdUri(), MirrorDisks: []*pb.MirrorDisk{{Id: "nope"}}},
	} {
		if err := src.client.MigrateWith(ctx, bad); err == nil {
			t.Errorf("Migrate %v succeeded, want a refusal", bad)
		}
	}
	if st, err := src.client.GetMigrationStatus(ctx); err != nil || st.GetStatus() != "none" || len(st.GetDisks()) != 0 {
		t.Errorf("after refused requests: %v (%v), want no migration and no mirrors", st, err)
	}
	if err := src.client.MigrateWith(ctx, &pb.MigrateRequest{Uri: prep.GetUri(), Options: opts, NbdUri: prep.GetNbdUri(), MirrorDisks: mirrorDisks}); err != nil {
		t.Fatal(err)
	}
	if _, err := srcRec.waitEvent(ctx, 0, "active", isMigration("active")); err != nil {
		t.Fatal(err)
	}
	if err := src.client.CancelMigration(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := src.client.FinalizeMigration(ctx, 0); !errors.Is(err, launcher.ErrMigrationFailed) {
		t.Errorf("finalize after cancel: %v, want ErrMigrationFailed", err)
	}
	st, err := src.client.GetMigrationStatus(ctx)
	if err != nil || st.GetStatus() != "cancelled" || len(st.GetDisks()) != 0 {
		t.Errorf("migration status %v (%v), want cancelled without mirrors", st, err)
	}
	if d := mustDomain(t, src); d.GetState() != pb.State_STATE_RUNNING {
		t.Errorf("source after cancel: %v, want RUNNING", d.GetState())
	}
	r, err := src.client.GuestExec(ctx, "/bin/sh", []string{"-c", "head -c 15 /dev/vda"}, nil, 0)
	if err != nil || string(r.GetStdout()) != testguest.DataDiskLabel {
		t.Errorf("source overlay after cancel reads %q (%v)", r.GetStdout(), err)
	}
	if after := sums(t, disks); after != before {
		t.Errorf("source disk files changed by the aborted migration")
	}
	if code, err := dst.wait(ctx); err != nil || code != launcher.ExitQEMUDied {
		t.Errorf("target launcher exit %d (%v), want %d", code, err, launcher.ExitQEMUDied)
	}
	dst.assertClean(t)
}

func sums(t *testing.T, disks []*pb.Disk) string {
	t.Helper()
	var out []string
	for _, d := range disks {
		b, err := os.ReadFile(d.GetPath())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%x", sha256.Sum256(b)))
	}
	return strings.Join(out, " ")
}

// assertBefore checks that the QMP log at path has a line containing first before the first
// line containing then.
func assertBefore(t *testing.T, path, first, then string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("read qmp log: %v", err)
		return
	}
	i, j := bytes.LastIndex(b, []byte(first)), bytes.Index(b, []byte(then))
	if i < 0 || j < 0 || i > j {
		t.Errorf("qmp log: %s at %d, %s at %d; want the first before the second", first, i, then, j)
	}
}
