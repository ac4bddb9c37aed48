package testguest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/test/prereq"
)

// bootDeadline is generous: TCG boots in 3–7 s, twice that when the other core is busy.
const bootDeadline = 60 * time.Second

func bootReady(t *testing.T, opts BootOptions) *VM {
	t.Helper()
	vm := Boot(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), bootDeadline)
	defer cancel()
	if err := vm.Console.Wait(ctx, MarkerReady); err != nil {
		t.Fatalf("boot guest: %v", err)
	}
	return vm
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestGuest boots one guest with a data disk, a NIC and two hotplug ports and checks every
// feature of the guest on it; powerdown comes last.
func TestGuest(t *testing.T) {
	vm := bootReady(t, BootOptions{DataDisk: true, NIC: true, HotplugPorts: 2})
	qmp := dialQMP(t, ctxT(t, 10*time.Second), vm.QMPSocket)

	t.Run("serial shell reads the data disk", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		if _, err := vm.Console.WaitFrom(ctx, 0, "# "); err != nil { // the shell's prompt
			t.Fatal(err)
		}
		off := vm.Console.Len()
		// The typed line is echoed; only the command's output contains "label=VMLET-…".
		fmt.Fprintf(vm.Serial, "echo label=$(head -c %d /dev/vda) sectors=$(cat /sys/block/vda/size)\n",
			len(DataDiskLabel))
		want := "label=" + DataDiskLabel + " sectors=131072" // 64 MiB
		if _, err := vm.Console.WaitFrom(ctx, off, want); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("guest agent answers and executes", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		qga := dialQGA(t, ctx, vm.QGASocket) // checks guest-sync-delimited
		var started struct{ Return struct{ PID int } }
		err := qga.run("guest-exec", map[string]any{"path": "sh",
			"arg": []string{"-c", "uptime >/dev/null && ls /sys/block && date +%Y"}, "capture-output": true},
			&started)
		if err != nil {
			t.Fatal(err)
		}
		// QGA has no exit event: poll guest-exec-status until the process exited.
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var st struct {
				Return struct {
					Exited   bool
					ExitCode int    `json:"exitcode"`
					OutData  string `json:"out-data"`
				}
			}
			if err := qga.run("guest-exec-status", map[string]any{"pid": started.Return.PID}, &st); err != nil {
				t.Fatal(err)
			}
			if st.Return.Exited {
				out, _ := base64.StdEncoding.DecodeString(st.Return.OutData)
				if st.Return.ExitCode != 0 || !strings.Contains(string(out), "vda") {
					t.Fatalf("guest-exec: exit code %d, output %q; want 0 and vda listed", st.Return.ExitCode, out)
				}
				return
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				t.Fatalf("wait for guest-exec pid %d: %v", started.Return.PID, ctx.Err())
			}
		}
	})

	t.Run("NIC gets a DHCP lease", func(t *testing.T) {
		line, _, err := vm.Console.WaitLine(ctxT(t, 30*time.Second), 0, MarkerIP+" eth0 ")
		if err != nil {
			t.Fatal(err)
		}
		if want := MarkerIP + " eth0 10.0.2.15"; line != want {
			t.Fatalf("got %q, want %q", line, want)
		}
	})

	t.Run("disk hotplug and unplug are reported", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		disk := Overlay(t, Assets(t).DataDisk)
		off := vm.Console.Len()
		mustRun(t, ctx, qmp, "blockdev-add", map[string]any{"driver": "qcow2", "node-name": "hpd0",
			"file": map[string]any{"driver": "file", "filename": disk}})
		mustRun(t, ctx, qmp, "device_add", map[string]any{"driver": "virtio-blk-pci", "id": "hpdisk0",
			"drive": "hpd0", "bus": "hp0"})
		if _, err := vm.Console.WaitFrom(ctx, off, MarkerDiskAdded+" vdb"); err != nil {
			t.Fatal(err)
		}
		off = vm.Console.Len()
		mustRun(t, ctx, qmp, "device_del", map[string]any{"id": "hpdisk0"})
		if _, err := qmp.event(ctx, "DEVICE_DELETED", map[string]any{"device": "hpdisk0"}); err != nil {
			t.Fatal(err)
		}
		if _, err := vm.Console.WaitFrom(ctx, off, MarkerDiskRemoved+" vdb"); err != nil {
			t.Fatal(err)
		}
		mustRun(t, ctx, qmp, "blockdev-del", map[string]any{"node-name": "hpd0"})
	})

	t.Run("NIC hotplug gets a lease and unplug is reported", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		off := vm.Console.Len()
		mustRun(t, ctx, qmp, "netdev_add", map[string]any{"type": "user", "id": "hpnet0"})
		mustRun(t, ctx, qmp, "device_add", map[string]any{"driver": "virtio-net-pci", "id": "hpnic0",
			"netdev": "hpnet0", "bus": "hp1", "romfile": ""})
		if _, err := vm.Console.WaitFrom(ctx, off, MarkerNICAdded+" eth1"); err != nil {
			t.Fatal(err)
		}
		if _, err := vm.Console.WaitFrom(ctx, off, MarkerIP+" eth1 10.0.2.15"); err != nil {
			t.Fatal(err)
		}
		off = vm.Console.Len()
		mustRun(t, ctx, qmp, "device_del", map[string]any{"id": "hpnic0"})
		if _, err := qmp.event(ctx, "DEVICE_DELETED", map[string]any{"device": "hpnic0"}); err != nil {
			t.Fatal(err)
		}
		if _, err := vm.Console.WaitFrom(ctx, off, MarkerNICRemoved+" eth1"); err != nil {
			t.Fatal(err)
		}
		mustRun(t, ctx, qmp, "netdev_del", map[string]any{"id": "hpnet0"})
	})

	t.Run("ACPI powerdown makes QEMU exit 0", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		off := vm.Console.Len()
		mustRun(t, ctx, qmp, "system_powerdown", nil)
		if _, err := vm.Console.WaitFrom(ctx, off, MarkerPoweroff); err != nil {
			t.Fatal(err)
		}
		if _, err := qmp.event(ctx, "SHUTDOWN", map[string]any{"guest": true}); err != nil {
			t.Fatal(err)
		}
		st, err := vm.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Exited() || st.ExitCode() != 0 {
			t.Fatalf("qemu ended with %v, want exit status 0", st)
		}
	})
}

func mustRun(t *testing.T, ctx context.Context, q *rawQMP, cmd string, args any) json.RawMessage {
	t.Helper()
	ret, err := q.run(ctx, cmd, args)
	if err != nil {
		t.Fatal(err)
	}
	return ret
}

// TestNoACPIIgnoresPowerdown: with vmlet.noacpi the guest sees the power button and ignores it.
func TestNoACPIIgnoresPowerdown(t *testing.T) {
	vm := bootReady(t, BootOptions{Cmdline: CmdlineNoACPI})
	ctx := ctxT(t, 30*time.Second)
	qmp := dialQMP(t, ctx, vm.QMPSocket)
	off := vm.Console.Len()
	mustRun(t, ctx, qmp, "system_powerdown", nil)
	if _, err := qmp.event(ctx, "POWERDOWN", nil); err != nil {
		t.Fatal(err)
	}
	// Positive signal that the guest handled the button press (and did not power off).
	if _, err := vm.Console.WaitFrom(ctx, off, MarkerPowerdownIgnored); err != nil {
		t.Fatal(err)
	}
	var status struct {
		Running bool
		Status  string
	}
	if err := json.Unmarshal(mustRun(t, ctx, qmp, "query-status", nil), &status); err != nil {
		t.Fatal(err)
	}
	if !status.Running || status.Status != "running" {
		t.Fatalf("query-status = %+v after ignored powerdown, want running", status)
	}
	select {
	case <-vm.Exited():
		t.Fatal("qemu exited although the guest ignores powerdown")
	default:
	}
	if strings.Contains(vm.Console.String()[off:], MarkerPoweroff) {
		t.Fatalf("guest printed %s with %s", MarkerPoweroff, CmdlineNoACPI)
	}
}

// TestCleanupLeavesNothing: after a test's cleanup the QEMU process is reaped and its folder gone.
func TestCleanupLeavesNothing(t *testing.T) {
	prereq.QEMU(t) // the boot subtest's guard only skips the subtest
	var pid int
	var dir, qmpSock string
	t.Run("boot", func(t *testing.T) {
		vm := bootReady(t, BootOptions{DataDisk: true})
		pid, dir, qmpSock = vm.PID, vm.Dir, vm.QMPSocket
	})
	if pid == 0 {
		t.Fatal("boot subtest did not start qemu")
	}
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil &&
		strings.Contains(string(cmdline), qmpSock) {
		t.Fatalf("qemu pid %d still exists after cleanup", pid)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("vm folder %s still exists after cleanup (stat: %v)", dir, err)
	}
}

// TestBootFailsFastWhenQEMUExits: a console wait ends with ErrConsoleClosed, not at the deadline,
// when QEMU dies (here: an unknown device).
func TestBootFailsFastWhenQEMUExits(t *testing.T) {
	vm := Boot(t, BootOptions{ExtraArgs: []string{"-device", "no-such-device"}})
	err := vm.Console.Wait(ctxT(t, bootDeadline), MarkerReady)
	if !errors.Is(err, ErrConsoleClosed) {
		t.Fatalf("wait on a dead qemu: %v, want ErrConsoleClosed", err)
	}
	st, err := vm.Wait(ctxT(t, 10*time.Second))
	if err != nil || st.ExitCode() == 0 {
		t.Fatalf("qemu state %v, %v; want a non-zero exit", st, err)
	}
	if !strings.Contains(vm.Stderr(), "no-such-device") {
		t.Fatalf("stderr %q does not name the bad device", vm.Stderr())
	}
}
