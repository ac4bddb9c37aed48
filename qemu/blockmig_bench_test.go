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
// the target), interleaved in each iteration (the order alternates) so that both see the same
// host load. Metrics per variant: total-ms from the first QMP command of the migration
// (ExportDisks/StartMirrors or migrate) until the guest runs on the target; mirror-ms until
// the mirrors were ready; qemu-total-ms and downtime-ms as QEMU reports them; paused-ms, the
// guest's whole pause (QEMU's downtime plus, with the disk, ending the mirrors, stopping the
// NBD server and cont).
//
//	go test -run '^$' -bench BenchmarkMigrateLocalDisk -benchtime 8x ./qemu/
func BenchmarkMigrateLocalDisk(b *testing.B) {
	var sum [2]diskMigrationTimes
	for i := range b.N {
		for k := range 2 {
			withDisk := (i+k)%2 == 1
			m := benchDiskMigration(b, withDisk)
			s := &sum[map[bool]int{false: 0, true: 1}[withDisk]]
			s.total += m.total
			s.mirror += m.mirror
			s.qemuTotal += m.qemuTotal
			s.downtime += m.downtime
			s.paused += m.paused
		}
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / n }
	for k, name := range []string{"nodisk", "disk"} {
		s := sum[k]
		b.ReportMetric(ms(s.total), name+"-total-ms")
		b.ReportMetric(ms(s.mirror), name+"-mirror-ms")
		b.ReportMetric(ms(s.qemuTotal), name+"-qemu-total-ms")
		b.ReportMetric(ms(s.downtime), name+"-downtime-ms")
		b.ReportMetric(ms(s.paused), name+"-paused-ms")
	}
}

type diskMigrationTimes struct{ total, mirror, qemuTotal, downtime, paused time.Duration }

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

func benchDiskMigration(b *testing.B, withDisk bool) diskMigrationTimes {
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
	mirrored := time.Now()
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
	return diskMigrationTimes{
		total: end.Sub(start), mirror: mirrored.Sub(start), qemuTotal: info.TotalTime,
		downtime: info.Downtime, paused: info.Downtime + end.Sub(completed),
	}
}
