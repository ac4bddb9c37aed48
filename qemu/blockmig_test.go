package qemu

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmlet/vmlet/test/testguest"
)

// Disk ids of the local-disk migration tests: the guest sees "ovl" (a containerDisk-like qcow2
// overlay over the shared data disk) as vda and "scratch" (a 64 MiB raw emptyDisk) as vdb.
const (
	ovlDisk     = "ovl"
	scratchDisk = "scratch"
	scratchSize = 64 << 20
)

// localDisks is a fresh overlay of the data disk and a fresh empty raw disk, as the agent
// creates them on each node.
func localDisks(t testing.TB) []Disk {
	t.Helper()
	raw := filepath.Join(t.TempDir(), "scratch.raw")
	if err := os.WriteFile(raw, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(raw, scratchSize); err != nil {
		t.Fatal(err)
	}
	return []Disk{
		{ID: ovlDisk, Path: testguest.Overlay(t, testguest.Assets(t).DataDisk), Format: FormatQCOW2},
		{ID: scratchDisk, Path: raw, Format: FormatRaw},
	}
}

var mirrorDisks = []MirrorDisk{{ID: ovlDisk, Shallow: true}, {ID: scratchDisk}}

// storagePair boots a source with local disks and a target with disk files of its own, and
// connects them: the target exports its disks over NBD, the source mirrors into them and
// waits until the mirrors are ready.
func storagePair(t testing.TB) (src, dst *testVM) {
	t.Helper()
	src, _, _ = prepareGuest(t, guestOpts{migratable: true, mutate: func(s *Spec) { s.Disks = localDisks(t) }})
	spec := src.MigrationSpec()
	dir := shortTempDir(t, "vt")
	spec.Name += "-target"
	spec.Serial = &Serial{Socket: filepath.Join(dir, "serial.sock"), LogFile: filepath.Join(dir, "serial.log")}
	spec.Agent = &Agent{Socket: filepath.Join(dir, "qga.sock")}
	spec.Disks = localDisks(t)
	for i := range spec.Disks {
		spec.Disks[i].Port = src.MigrationSpec().Disks[i].Port
	}
	dst = startGuest(t, &spec)
	ctx := ctxT(t, opTimeout)
	sock := filepath.Join(dir, "nbd.sock")
	if err := dst.ExportDisks(ctx, sock, []string{ovlDisk, scratchDisk}); err != nil {
		t.Fatal(err)
	}
	if err := src.StartMirrors(ctx, MirrorOptions{NBDSocket: sock, Disks: mirrorDisks}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var last []MirrorProgress
	if err := src.WaitMirrorsReady(ctx, func(p []MirrorProgress) { last = p }); err != nil {
		t.Fatal(err)
	}
	t.Logf("mirrors ready after %s: %+v", time.Since(start), last)
	return src, dst
}

// TestMigrateLocalDisks migrates a guest whose disks are node-local: while the memory
// migration runs (held at 4 MiB/s until then), the guest writes a marker to its emptyDisk and
// to its overlay; after the switchover the target, which started from its own fresh files,
// reads both markers (with its page cache dropped, so from the disks) and the overlay's
// backing data. The target stays paused until the source stopped its mirrors and the target
// its NBD server.
func TestMigrateLocalDisks(t *testing.T) {
	src, dst := storagePair(t)
	ctx := ctxT(t, 3*opTimeout)
	for _, vm := range []*testVM{src, dst} {
		if err := vm.SetMigrationCaps(ctx, MigrationCaps{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.SetMigrationParams(ctx, MigrationParams{MaxBandwidth: 4 << 20}); err != nil {
		t.Fatal(err)
	}
	uri := "unix:" + filepath.Join(shortTempDir(t, "vm"), "mig.sock")
	if err := dst.MigrateIncoming(ctx, uri); err != nil {
		t.Fatal(err)
	}
	in := make(chan error, 1)
	go func() {
		_, err := dst.WaitIncoming(ctx, false)
		in <- err
	}()
	if err := src.Migrate(ctx, uri); err != nil {
		t.Fatal(err)
	}
	active := make(chan struct{})
	out := make(chan error, 1)
	var final MigrationInfo
	go func() {
		var err error
		final, err = src.WaitMigration(ctx, func(mi MigrationInfo) {
			if mi.Status == "active" && active != nil {
				close(active)
				active = nil
			}
		})
		out <- err
	}()
	select {
	case <-active:
	case err := <-out:
		t.Fatalf("migration ended before it was active: %v", err)
	}
	marker := fmt.Sprintf("MARKER-%d", time.Now().UnixNano())
	src.sh(t, "printf "+marker+" | dd of=/dev/vdb conv=fsync 2>/dev/null")
	src.sh(t, "printf "+marker+" | dd of=/dev/vda bs=1M seek=1 conv=fsync 2>/dev/null")
	if mi, err := src.MigrationStatus(ctx); err != nil || mi.Status != "active" {
		t.Fatalf("migration %+v (%v) after the guest wrote: the writes were not made during the migration", mi, err)
	}
	if err := src.SetMigrationParams(ctx, MigrationParams{MaxBandwidth: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if err := <-out; err != nil {
		t.Fatalf("source migration: %v", err)
	}
	if err := <-in; err != nil {
		t.Fatalf("target migration: %v", err)
	}
	t.Logf("migration with mirrored disks: total %s downtime %s", final.TotalTime, final.Downtime)
	if st, err := dst.Status(ctx); err != nil || st.Running {
		t.Fatalf("target status %+v (%v) before the mirrors ended, want paused", st, err)
	}
	if err := src.StopMirrors(ctx); err != nil {
		t.Fatal(err)
	}
	if m := src.Mirrors(); len(m) != 0 {
		t.Errorf("mirrors left after StopMirrors: %v", m)
	}
	if err := dst.StopNBDServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dst.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if err := src.Quit(ctx); err != nil {
		t.Fatal(err)
	}
	dst.sh(t, "echo 3 > /proc/sys/vm/drop_caches")
	if got := dst.sh(t, fmt.Sprintf("head -c %d /dev/vdb", len(marker))); got != marker {
		t.Errorf("target emptyDisk reads %q, want %q", got, marker)
	}
	if got := dst.sh(t, fmt.Sprintf("dd if=/dev/vda bs=1M skip=1 count=1 2>/dev/null | head -c %d", len(marker))); got != marker {
		t.Errorf("target overlay reads %q at 1 MiB, want %q", got, marker)
	}
	if got := dst.sh(t, "head -c 15 /dev/vda"); got != testguest.DataDiskLabel {
		t.Errorf("target overlay reads %q at 0, want the backing image's label", got)
	}
	if got := readAt(t, dst.spec.Disks[1].Path, 0, len(marker)); got != marker {
		t.Errorf("target's emptyDisk file holds %q, want %q", got, marker)
	}
}

// TestMigrateLocalDisksCancel aborts a migration with mirrored disks: CancelMigration, then
// StopMirrors. The source keeps running on its own disks, whose files are byte for byte what
// they were before; the target gives up.
func TestMigrateLocalDisksCancel(t *testing.T) {
	src, dst := storagePair(t)
	before := fileSums(t, src.spec.Disks)
	ctx := ctxT(t, 2*opTimeout)
	if err := src.SetMigrationParams(ctx, MigrationParams{MaxBandwidth: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	uri := "unix:" + filepath.Join(shortTempDir(t, "vm"), "mig.sock")
	if err := dst.MigrateIncoming(ctx, uri); err != nil {
		t.Fatal(err)
	}
	if err := src.Migrate(ctx, uri); err != nil {
		t.Fatal(err)
	}
	_, err := src.WaitMigration(ctx, func(mi MigrationInfo) {
		if mi.Status == "active" {
			if err := src.CancelMigration(ctx); err != nil {
				t.Errorf("CancelMigration: %v", err)
			}
		}
	})
	if !errors.Is(err, ErrMigrationFailed) {
		t.Fatalf("WaitMigration after cancel = %v, want a cancelled MigrationError", err)
	}
	if err := src.StopMirrors(ctx); err != nil {
		t.Fatal(err)
	}
	if m := src.Mirrors(); len(m) != 0 {
		t.Errorf("mirrors left after StopMirrors: %v", m)
	}
	if st, err := src.Status(ctx); err != nil || st.Status != "running" {
		t.Fatalf("source status after cancel = %+v, %v", st, err)
	}
	if got := src.sh(t, "head -c 15 /dev/vda"); got != testguest.DataDiskLabel {
		t.Errorf("source overlay reads %q after the abort", got)
	}
	if after := fileSums(t, src.spec.Disks); !bytes.Equal(bytes.Join(before, nil), bytes.Join(after, nil)) {
		t.Errorf("source disk files changed by the aborted migration")
	}
	if exit := dst.waitExit(t); exit.Reason != ExitCrash || exit.Code != 1 {
		t.Errorf("target exit = %+v, want status 1 after the broken stream", exit)
	}
}

func fileSums(t testing.TB, disks []Disk) [][]byte {
	t.Helper()
	var sums [][]byte
	for _, d := range disks {
		f, err := os.Open(d.Path)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, h.Sum(nil))
	}
	return sums
}

func readAt(t testing.TB, path string, off int64, n int) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return string(b)
}
