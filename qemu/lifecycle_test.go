package qemu

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/accel"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestBootPowerdown boots the guest from a folder whose name is hostile to QEMU's option
// parser (kernel, initrd, disk, sockets and log all live there), checks what Info reports and
// that cold-plugged disks on all three buses are attached, then powers it down: a clean exit
// classified as guest shutdown, with every socket removed.
func TestBootPowerdown(t *testing.T) {
	prereq.QEMU(t)
	files := testguest.Assets(t)
	dir := shortTempDir(t, "v,id=x,")
	for _, f := range []string{files.Kernel, files.Initrd} {
		copyFile(t, f, filepath.Join(dir, "b=o,ot "+filepath.Base(f)))
	}
	data := testguest.Overlay(t, files.DataDisk)
	hostileDisk := filepath.Join(dir, "d,a=t\"a.qcow2")
	copyFile(t, data, hostileDisk)
	spec := guestSpec(t, guestOpts{dir: dir, hotplugPorts: 1, mutate: func(s *Spec) {
		s.Boot.Kernel = filepath.Join(dir, "b=o,ot "+filepath.Base(files.Kernel))
		s.Boot.Initrd = filepath.Join(dir, "b=o,ot "+filepath.Base(files.Initrd))
		s.UUID = "6f1e1f44-3b2a-4c55-9e7b-0123456789ab"
		s.RNG = true
		s.Disks = []Disk{
			{ID: "data", Path: hostileDisk, Format: FormatQCOW2, Serial: "DATA-1"},
			{ID: "sdisk", Path: testguest.Overlay(t, files.DataDisk), Format: FormatQCOW2, Bus: BusSCSI},
			{ID: "cd", Path: testguest.Overlay(t, files.DataDisk), Format: FormatQCOW2, Bus: BusSATA, CDROM: true},
		}
	}})
	vm := startGuest(t, spec)
	vm.waitReady(t)

	info := vm.Info()
	if want := hostQEMUVersion(t); info.Version != want || info.PID <= 0 {
		t.Errorf("Info = %+v: want a pid and the QEMU version from the greeting", info)
	}
	if info.Accel != accel.TCG || info.AccelReason == "" || info.CPUModel != "max" || info.Machine != "q35" {
		t.Errorf("Info = %+v: want tcg with a reason, cpu max, machine q35", info)
	}
	st, err := vm.Status(ctxT(t, opTimeout))
	if err != nil || !st.Running || st.Status != "running" {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	if got := vm.sh(t, "head -c 15 /dev/vda"); got != testguest.DataDiskLabel {
		t.Errorf("guest reads %q from vda, want the data disk label", got)
	}
	if got := vm.sh(t, "cat /sys/block/vda/serial"); got != "DATA-1" {
		t.Errorf("vda serial = %q", got)
	}
	if got := vm.sh(t, "cat /sys/class/dmi/id/product_uuid"); got != spec.UUID {
		t.Errorf("guest uuid = %q, want %q", got, spec.UUID)
	}
	var blocks []struct {
		Device string `json:"device"`
		QDev   string `json:"qdev"`
	}
	if err := vm.Monitor().Execute(ctxT(t, opTimeout), "query-block", nil, &blocks); err != nil {
		t.Fatal(err)
	}
	qdevs := map[string]bool{}
	for _, b := range blocks {
		qdevs[filepath.Base(strings.TrimSuffix(b.QDev, "/virtio-backend"))] = true
	}
	for _, id := range []string{"data", "sdisk", "cd"} {
		if !qdevs[id] {
			t.Errorf("disk %s not attached; query-block: %+v", id, blocks)
		}
	}

	if err := vm.Powerdown(ctxT(t, opTimeout)); err != nil {
		t.Fatal(err)
	}
	exit := vm.waitExit(t)
	if exit.Reason != ExitGuestShutdown || exit.Code != 0 || exit.Killed || exit.ShutdownReason != "guest-shutdown" {
		t.Fatalf("exit = %+v, want a guest shutdown with status 0", exit)
	}
	log, err := os.ReadFile(spec.Serial.LogFile)
	if err != nil || !strings.Contains(string(log), testguest.MarkerPoweroff) {
		t.Errorf("serial log lacks %s (err %v): %q", testguest.MarkerPoweroff, err, shorten(string(log), 300))
	}
}

// TestPauseResetKill: while paused the guest's clock stands still (its uptime advances by the
// host's elapsed time minus the paused window); Reset reboots it; Kill is a crash by us.
func TestPauseResetKill(t *testing.T) {
	vm := startGuest(t, guestSpec(t, guestOpts{}))
	vm.waitReady(t)
	ctx := ctxT(t, opTimeout)

	up0, host0 := vm.guestUptime(t), time.Now()
	if err := vm.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()
	if st, err := vm.Status(ctx); err != nil || st.Running || st.Status != "paused" {
		t.Fatalf("Status after Pause = %+v, %v", st, err)
	}
	// The measured quantity is host time itself: nothing observable happens inside a paused
	// guest, so the paused window is a plain timer (the one place this package waits on one),
	// while still watching for QEMU dying.
	const window = 2 * time.Second
	select {
	case <-time.After(window):
	case <-vm.Exited():
		t.Fatal("qemu exited while paused")
	}
	if st, err := vm.Status(ctx); err != nil || st.Status != "paused" {
		t.Fatalf("Status at the end of the pause = %+v, %v", st, err)
	}
	if err := vm.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	paused := time.Since(pausedAt)
	up1, host1 := vm.guestUptime(t), time.Now()
	guestDelta, hostDelta := up1-up0, host1.Sub(host0).Seconds()
	t.Logf("host %.2fs, guest %.2fs, paused %.2fs", hostDelta, guestDelta, paused.Seconds())
	if lost := hostDelta - guestDelta; lost < 0.8*window.Seconds() {
		t.Fatalf("guest clock lost only %.2fs over a %.2fs pause: it kept running", lost, paused.Seconds())
	}
	if guestDelta <= 0 {
		t.Fatalf("guest clock did not advance at all (%.2fs): it did not resume", guestDelta)
	}

	// Reset reboots the guest: READY a second time, and its tmpfs starts empty.
	vm.sh(t, "touch /tmp/before-reset")
	if err := vm.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	vm.waitReady(t)
	if out := vm.sh(t, "ls /tmp"); strings.Contains(out, "before-reset") {
		t.Errorf("/tmp after Reset still has the file written before: the guest did not reboot")
	}

	// Kill: classified as a crash caused by us.
	if err := vm.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	exit, _ := vm.ExitInfo()
	if exit.Reason != ExitCrash || !exit.Killed || exit.Signal != syscall.SIGKILL || exit.Code != -1 {
		t.Fatalf("exit after Kill = %+v, want a crash by SIGKILL marked Killed", exit)
	}
	if _, err := vm.Status(ctx); !errors.Is(err, ErrExited) {
		t.Fatalf("Status after exit = %v, want ErrExited", err)
	}
}

// TestShutdownForcesQuit: a guest that ignores the power button is quit after the grace
// period; the exit is a host quit, not a guest shutdown.
func TestShutdownForcesQuit(t *testing.T) {
	vm := startGuest(t, guestSpec(t, guestOpts{cmdline: testguest.CmdlineNoACPI}))
	vm.waitReady(t)
	from := vm.console.Len()
	start := time.Now()
	if err := vm.Shutdown(ctxT(t, opTimeout), 3*time.Second); err != nil {
		t.Fatal(err)
	}
	exit, _ := vm.ExitInfo()
	if exit.Reason != ExitHostQuit || exit.Code != 0 || exit.Killed || exit.ShutdownReason != "host-qmp-quit" {
		t.Fatalf("exit = %+v, want host quit after the grace period", exit)
	}
	if _, err := vm.console.WaitFrom(ctxT(t, time.Second), from, testguest.MarkerPowerdownIgnored); err != nil {
		t.Errorf("guest never saw the power button: %v", err)
	}
	if took := time.Since(start); took < 3*time.Second {
		t.Errorf("Shutdown took %s, less than the grace period", took)
	}
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestShutdownPausedGuest: a guest paused with QMP stop cannot see the power button, so
// Shutdown resumes it first and the shutdown stays graceful (a guest shutdown, not a quit at
// the end of the grace period).
func TestShutdownPausedGuest(t *testing.T) {
	vm := startGuest(t, guestSpec(t, guestOpts{}))
	vm.waitReady(t)
	if err := vm.Pause(ctxT(t, opTimeout)); err != nil {
		t.Fatal(err)
	}
	if st, err := vm.Status(ctxT(t, opTimeout)); err != nil || st.Status != "paused" {
		t.Fatalf("Status after Pause = %+v, %v", st, err)
	}
	if err := vm.Shutdown(ctxT(t, 2*opTimeout), opTimeout); err != nil {
		t.Fatal(err)
	}
	exit, _ := vm.ExitInfo()
	if exit.Reason != ExitGuestShutdown || exit.Code != 0 || exit.Killed {
		t.Fatalf("exit = %+v, want a guest shutdown", exit)
	}
}
