package qemu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/qemu/accel"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// startTarget starts a migration target for src: src's MigrationSpec with sockets of its own.
func startTarget(t testing.TB, src *testVM) *testVM {
	t.Helper()
	spec := src.MigrationSpec()
	dir := shortTempDir(t, "vt")
	spec.Name += "-target"
	spec.Serial = &Serial{Socket: filepath.Join(dir, "serial.sock"), LogFile: filepath.Join(dir, "serial.log")}
	spec.Agent = &Agent{Socket: filepath.Join(dir, "qga.sock")}
	return startGuest(t, &spec)
}

// migration runs one migration from src to dst and returns both sides' final info plus every
// status the source reported on the way.
type migration struct {
	caps     MigrationCaps
	params   MigrationParams
	listen   string                   // target uri; "" = unix socket in a temp dir
	fds      bool                     // use a socketpair and fd: uris instead
	onStatus func(MigrationInfo) bool // called with every source progress; return true once to run during
	during   func(t testing.TB)       // run once onStatus said so (e.g. StartPostcopy)
}

type migrationResult struct {
	src, dst    MigrationInfo
	statuses    []string
	maxThrottle int
}

func (m migration) run(t testing.TB, src, dst *testVM) migrationResult {
	t.Helper()
	ctx := ctxT(t, 3*opTimeout)
	for _, vm := range []*testVM{src, dst} {
		if err := vm.SetMigrationCaps(ctx, m.caps); err != nil {
			t.Fatal(err)
		}
		if err := vm.SetMigrationParams(ctx, m.params); err != nil {
			t.Fatal(err)
		}
	}
	var startSource func() error
	if m.fds {
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		a, b := os.NewFile(uintptr(pair[0]), "mig-src"), os.NewFile(uintptr(pair[1]), "mig-dst")
		defer a.Close() // QEMU got its own copies
		defer b.Close()
		if err := dst.MigrateIncomingFD(ctx, b); err != nil {
			t.Fatal(err)
		}
		startSource = func() error { return src.MigrateFD(ctx, a) }
	} else {
		uri := m.listen
		if uri == "" {
			uri = "unix:" + filepath.Join(shortTempDir(t, "vm"), "mig.sock")
		}
		if err := dst.MigrateIncoming(ctx, uri); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(uri, "tcp:") {
			st, err := dst.MigrationStatus(ctx)
			if err != nil || len(st.SocketAddresses) != 1 {
				t.Fatalf("target listening addresses: %+v, %v", st, err)
			}
			uri = "tcp:" + st.SocketAddresses[0]
		}
		startSource = func() error { return src.Migrate(ctx, uri) }
	}
	type inResult struct {
		info MigrationInfo
		err  error
	}
	in := make(chan inResult, 1)
	go func() {
		info, err := dst.WaitIncoming(ctx, true)
		in <- inResult{info, err}
	}()
	if err := startSource(); err != nil {
		t.Fatal(err)
	}
	var res migrationResult
	var err error
	var once sync.Once
	res.src, err = src.WaitMigration(ctx, func(mi MigrationInfo) {
		if len(res.statuses) == 0 || res.statuses[len(res.statuses)-1] != mi.Status {
			res.statuses = append(res.statuses, mi.Status)
		}
		res.maxThrottle = max(res.maxThrottle, mi.CPUThrottlePercentage)
		if m.onStatus != nil && m.onStatus(mi) {
			once.Do(func() { m.during(t) })
		}
	})
	if err != nil {
		t.Fatalf("source migration: %v (statuses %v)", err, res.statuses)
	}
	r := <-in
	if r.err != nil {
		t.Fatalf("target migration: %v", r.err)
	}
	res.dst = r.info
	t.Logf("migration: statuses %v total %s downtime %s transferred %d MiB passes %d max throttle %d%%",
		res.statuses, res.src.TotalTime, res.src.Downtime, res.src.RAMTransferred>>20, res.src.DirtySyncCount, res.maxThrottle)
	return res
}

// afterMigration checks the guest moved: the source waits in postmigrate and quits cleanly,
// the target runs, the guest's uptime kept growing, the file written before is still there.
func afterMigration(t testing.TB, src, dst *testVM, uptimeBefore float64, token string) {
	t.Helper()
	ctx := ctxT(t, opTimeout)
	// QEMU reports the migration completed (query-migrate, the MIGRATION event) a moment before
	// its migration thread moves the source from finish-migrate to postmigrate; no event marks
	// that step, so it is polled (QEMU 10 post-copy, seen once in CI).
	poll.Until(t, opTimeout, "source in postmigrate", func() (bool, string) {
		st, err := src.Status(ctx)
		if err == nil && st.Status == "finish-migrate" {
			return false, st.Status
		}
		if err != nil || st.Status != "postmigrate" {
			t.Errorf("source status = %+v, %v; want postmigrate", st, err)
		}
		return true, ""
	})
	if st, err := dst.Status(ctx); err != nil || !st.Running {
		t.Fatalf("target status = %+v, %v; want running", st, err)
	}
	if err := src.Quit(ctx); err != nil {
		t.Fatal(err)
	}
	if exit, _ := src.ExitInfo(); exit.Reason != ExitHostQuit {
		t.Errorf("source exit = %+v, want host quit", exit)
	}
	if up := dst.guestUptime(t); up <= uptimeBefore {
		t.Errorf("guest uptime %.2f after migration, %.2f before", up, uptimeBefore)
	}
	if got := dst.sh(t, "cat /tmp/token"); got != token {
		t.Errorf("file written before migration reads %q on the target, want %q", got, token)
	}
}

// prepareGuest boots a migration source and writes a token file into the guest's /tmp.
func prepareGuest(t testing.TB, o guestOpts) (src *testVM, uptime float64, token string) {
	t.Helper()
	src = startGuest(t, guestSpec(t, o))
	src.waitReady(t)
	token = fmt.Sprintf("token-%d", time.Now().UnixNano())
	src.sh(t, "echo "+token+" > /tmp/token")
	return src, src.guestUptime(t), token
}

// startDirtying starts a loop in the guest (through guest-exec) that keeps rewriting 16 MiB of
// tmpfs (RAM) with random data, ≈145 MB/s under TCG here (zero pages would migrate almost for
// free). Its pid is in /tmp/dirty.pid.
func startDirtying(t testing.TB, vm *testVM) {
	t.Helper()
	vm.sh(t, "head -c 16m /dev/urandom > /tmp/src; cp /tmp/src /tmp/dirty")
	vm.sh(t, "(while :; do dd if=/tmp/src of=/tmp/dirty bs=1M conv=notrunc 2>/dev/null; done) </dev/null >/dev/null 2>&1 & echo $! > /tmp/dirty.pid")
}

// TestMigratePrecopy migrates a migratable guest (named CPU model, versioned machine type) with
// a hotplugged disk over a unix socket: the target gets the disk at the same slot via
// MigrationSpec, and the guest keeps running there with its memory and its disk.
func TestMigratePrecopy(t *testing.T) {
	src, up, token := prepareGuest(t, guestOpts{migratable: true, hotplugPorts: 1})
	if info := src.Info(); info.CPUModel != DefaultMigratableCPU || !versionRe.MatchString(info.Machine) {
		t.Fatalf("migratable vm runs cpu %s machine %s", info.CPUModel, info.Machine)
	}
	ctx := ctxT(t, opTimeout)
	from := src.console.Len()
	disk := Disk{ID: "hot", Path: testguest.Overlay(t, testguest.Assets(t).DataDisk), Format: FormatQCOW2}
	if err := src.AddDisk(ctx, disk); err != nil {
		t.Fatal(err)
	}
	if _, err := src.console.WaitFrom(ctx, from, testguest.MarkerDiskAdded+" vda"); err != nil {
		t.Fatal(err)
	}
	dst := startTarget(t, src)
	if d := dst.Disks(); len(d) != 1 || d[0].ID != "hot" || d[0].Port != 1 {
		t.Fatalf("target disks = %+v, want the hotplugged disk on port 1", d)
	}
	res := migration{params: MigrationParams{MaxBandwidth: 1 << 30, DowntimeLimit: 300 * time.Millisecond}}.run(t, src, dst)
	if res.src.Status != "completed" || res.src.TotalTime <= 0 || res.src.Downtime <= 0 {
		t.Errorf("source final info = %+v, want completed with total time and downtime", res.src)
	}
	afterMigration(t, src, dst, up, token)
	if got := dst.sh(t, "head -c 15 /dev/vda"); got != testguest.DataDiskLabel {
		t.Errorf("hotplugged disk reads %q on the target", got)
	}
}

// TestMigrateAutoConverge migrates a guest that dirties memory faster than the bandwidth
// allows: only throttling its vCPUs (auto-converge) lets the migration finish. Under TCG on a
// QEMU before 9.0 SetMigrationCaps refuses auto-converge (see its doc; TestMigratePostcopy
// checks the refusal there).
func TestMigrateAutoConverge(t *testing.T) {
	if LiveMigrationLosesWrites(string(accel.TCG), hostQEMUVersion(t)) {
		prereq.KVM(t)
	}
	src, up, token := prepareGuest(t, guestOpts{kvm: accel.Probe().KVMUsable()})
	startDirtying(t, src)
	dst := startTarget(t, src)
	res := migration{
		caps: MigrationCaps{AutoConverge: true},
		params: MigrationParams{MaxBandwidth: 32 << 20, DowntimeLimit: 50 * time.Millisecond,
			CPUThrottleInitial: 50, CPUThrottleIncrement: 20},
		listen: "tcp:127.0.0.1:0",
	}.run(t, src, dst)
	if res.maxThrottle == 0 {
		t.Errorf("migration finished without throttling the guest (passes %d): the workload did not dirty enough", res.src.DirtySyncCount)
	}
	afterMigration(t, src, dst, up, token)
	dst.sh(t, "kill -0 $(cat /tmp/dirty.pid)") // the dirtying loop survived the move
}

// TestMigrateMultifd migrates over four parallel TCP channels on loopback.
func TestMigrateMultifd(t *testing.T) {
	src, up, token := prepareGuest(t, guestOpts{})
	dst := startTarget(t, src)
	res := migration{
		caps:   MigrationCaps{Multifd: true},
		params: MigrationParams{MultifdChannels: 4, MaxBandwidth: 1 << 30},
		listen: "tcp:127.0.0.1:0",
	}.run(t, src, dst)
	if res.src.Status != "completed" {
		t.Errorf("final status %s", res.src.Status)
	}
	afterMigration(t, src, dst, up, token)
}

// TestMigratePostcopy switches a migration of a dirtying guest to post-copy (over an fd pair):
// the guest runs on the target while its pages still arrive.
//
// It also checks that auto-converge, the other answer to such guests, is refused under TCG.
func TestMigratePostcopy(t *testing.T) {
	src, up, token := prepareGuest(t, guestOpts{})
	startDirtying(t, src)
	dst := startTarget(t, src)
	if LiveMigrationLosesWrites(string(accel.TCG), src.Info().Version) {
		if err := src.SetMigrationCaps(ctxT(t, opTimeout), MigrationCaps{AutoConverge: true}); !errors.Is(err, ErrUnsafe) {
			t.Errorf("SetMigrationCaps(AutoConverge) under tcg = %v, want ErrUnsafe", err)
		}
	}
	res := migration{
		caps:     MigrationCaps{PostcopyRAM: true},
		params:   MigrationParams{MaxBandwidth: 64 << 20},
		fds:      true,
		onStatus: func(mi MigrationInfo) bool { return mi.Status == "active" },
		during: func(t testing.TB) {
			if err := src.StartPostcopy(ctxT(t, opTimeout)); err != nil {
				t.Errorf("StartPostcopy: %v", err)
			}
		},
	}.run(t, src, dst)
	if !contains(res.statuses, "postcopy-active") {
		t.Errorf("statuses %v: never went post-copy", res.statuses)
	}
	afterMigration(t, src, dst, up, token)
	dst.sh(t, "kill -0 $(cat /tmp/dirty.pid)") // the dirtying loop survived the move
}

// TestMigrateCancel cancels a slow migration: the source keeps running the guest; the target
// gives up.
func TestMigrateCancel(t *testing.T) {
	src, _, token := prepareGuest(t, guestOpts{})
	dst := startTarget(t, src)
	ctx := ctxT(t, opTimeout)
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
	var me *MigrationError
	if !errors.As(err, &me) || me.Status != "cancelled" || !errors.Is(err, ErrMigrationFailed) {
		t.Fatalf("WaitMigration after cancel = %v, want a cancelled MigrationError", err)
	}
	if st, err := src.Status(ctx); err != nil || st.Status != "running" {
		t.Fatalf("source status after cancel = %+v, %v", st, err)
	}
	if got := src.sh(t, "cat /tmp/token"); got != token {
		t.Errorf("source guest after cancel reads %q", got)
	}
	// The target's incoming stream broke: QEMU 7.2 exits with status 1.
	exit := dst.waitExit(t)
	if exit.Reason != ExitCrash || exit.Code != 1 {
		t.Errorf("target exit = %+v, want status 1 after the broken stream", exit)
	}
}
