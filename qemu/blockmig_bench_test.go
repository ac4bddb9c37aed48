package qemu

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkMigrateLocalDisk migrates an idle guest at unlimited bandwidth without disks and
// with one mirrored 64 MiB raw emptyDisk full of random data (sync full into a fresh file on
// the target), in the same run. Metrics: total-ms from the first QMP command of the migration
// (ExportDisks/StartMirrors or migrate) until the guest runs on the target; qemu-total-ms and
// downtime-ms as QEMU reports them; paused-ms, the guest's pause as a whole (QEMU's downtime
// plus, with disks, ending the mirrors, stopping the NBD server and cont).
//
//	go test -run '^$' -bench BenchmarkMigrateLocalDisk -benchtime 3x ./qemu/
func BenchmarkMigrateLocalDisk(b *testing.B) {
	for _, withDisk := range []bool{false, true} {
		name := map[bool]string{false: "no-disk", true: "emptydisk-64MiB"}[withDisk]
		b.Run(name, func(b *testing.B) {
			var total, qemuTotal, down, paused time.Duration
			for range b.N {
				t0, q, d, p := benchDiskMigration(b, withDisk)
				total += t0
				qemuTotal += q
				down += d
				paused += p
			}
			n := float64(b.N)
			b.ReportMetric(float64(total.Milliseconds())/n, "total-ms")
			b.ReportMetric(float64(qemuTotal.Milliseconds())/n, "qemu-total-ms")
			b.ReportMetric(float64(down.Milliseconds())/n, "downtime-ms")
			b.ReportMetric(float64(paused.Milliseconds())/n, "paused-ms")
		})
	}
}

func benchDisk(b *testing.B, random bool) Disk {
	p := filepath.Join(b.TempDir(), "scratch.raw")
	buf := make([]byte, scratchSize)
	if random {
		_, _ = rand.Read(buf)
	}
	if err := os.WriteFile(p, buf, 0o600); err != nil {
		b.Fatal(err)
	}
	return Disk{ID: scratchDisk, Path: p, Format: FormatRaw}
}

func benchDiskMigration(b *testing.B, withDisk bool) (total, qemuTotal, downtime, paused time.Duration) {
	b.StopTimer()
	src, _, _ := prepareGuest(b, guestOpts{migratable: true, mutate: func(s *Spec) {
		if withDisk {
			s.Disks = []Disk{benchDisk(b, true)}
		}
	}})
	spec := src.MigrationSpec()
	dir := shortTempDir(b, "vt")
	spec.Name += "-target"
	spec.Serial = &Serial{Socket: filepath.Join(dir, "serial.sock"), LogFile: filepath.Join(dir, "serial.log")}
	spec.Agent = &Agent{Socket: filepath.Join(dir, "qga.sock")}
	if withDisk {
		d := benchDisk(b, false)
		d.Port = spec.Disks[0].Port
		spec.Disks = []Disk{d}
	}
	dst := startGuest(b, &spec)
	ctx := ctxT(b, 3*opTimeout)
	for _, vm := range []*testVM{src, dst} {
		if err := vm.SetMigrationCaps(ctx, MigrationCaps{}); err != nil {
			b.Fatal(err)
		}
	}
	if err := src.SetMigrationParams(ctx, MigrationParams{MaxBandwidth: 10 << 30}); err != nil {
		b.Fatal(err)
	}
	uri := "unix:" + filepath.Join(shortTempDir(b, "vm"), "mig.sock")
	b.StartTimer()
	start := time.Now()
	if withDisk {
		sock := filepath.Join(dir, "nbd.sock")
		if err := dst.ExportDisks(ctx, sock, []string{scratchDisk}); err != nil {
			b.Fatal(err)
		}
		if err := src.StartMirrors(ctx, MirrorOptions{NBDSocket: sock, Disks: []MirrorDisk{{ID: scratchDisk}}}); err != nil {
			b.Fatal(err)
		}
		if err := src.WaitMirrorsReady(ctx, nil); err != nil {
			b.Fatal(err)
		}
	}
	if err := dst.MigrateIncoming(ctx, uri); err != nil {
		b.Fatal(err)
	}
	in := make(chan error, 1)
	go func() {
		_, err := dst.WaitIncoming(ctx, !withDisk)
		in <- err
	}()
	if err := src.Migrate(ctx, uri); err != nil {
		b.Fatal(err)
	}
	info, err := src.WaitMigration(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := <-in; err != nil {
		b.Fatal(err)
	}
	completed := time.Now()
	if withDisk {
		if err := src.StopMirrors(ctx); err != nil {
			b.Fatal(err)
		}
		if err := dst.StopNBDServer(ctx); err != nil {
			b.Fatal(err)
		}
		if err := dst.Resume(ctx); err != nil {
			b.Fatal(err)
		}
	}
	end := time.Now()
	b.StopTimer()
	if !withDisk {
		end = completed // WaitIncoming resumed the guest at completion
	}
	if withDisk {
		if got := readAt(b, spec.Disks[0].Path, 0, 4096); got != readAt(b, src.spec.Disks[0].Path, 0, 4096) {
			b.Errorf("target disk differs from the source's")
		}
	}
	_ = src.Quit(ctx)
	return end.Sub(start), info.TotalTime, info.Downtime, info.Downtime + end.Sub(completed)
}
