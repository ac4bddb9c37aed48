package imagebuild

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/testguest"
)

// bootTimeout bounds one boot of the test guest under TCG on a busy 2-core machine.
const bootTimeout = 3 * time.Minute

// bootOptions say what bootGuest attaches besides the kernel, serial console and agent.
type bootOptions struct {
	binary string         // the emulator (a wrapper script); "" means qemu-system-x86_64 from PATH
	dir    string         // where the disk overlay, the CD-ROM and the sockets go
	tap    string         // a tap in QEMU's network namespace for a virtio NIC; "" means no NIC
	full   bool           // every device vmlet can give a VM: disks (virtio qcow2, SCSI, SATA CD-ROM), RNG, balloon, VGA + VNC
	ready  func(*qemu.VM) // called once the guest is ready, before QEMU quits
	owner  int            // uid and gid that get the overlay (QEMU's user); 0 keeps root's
}

// bootGuest starts the test guest through vmlet's qemu package (the argv and QMP device adds
// the launcher uses), waits for its ready marker on the serial console and quits QEMU.
func bootGuest(t *testing.T, o bootOptions) {
	t.Helper()
	g := testguest.Assets(t)
	overlay := filepath.Join(o.dir, "data.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", g.DataDisk, overlay).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create overlay: %v\n%s", err, out)
	}
	if o.owner != 0 {
		if err := os.Chown(overlay, o.owner, o.owner); err != nil {
			t.Fatal(err)
		}
	}
	log := filepath.Join(o.dir, "serial.log")
	spec := &qemu.Spec{
		Name:      "imagebuild-" + strings.ToLower(filepath.Base(o.dir)),
		MemoryMiB: 256,
		// TCG whatever the host: QEMU loads its TCG accelerator as a module (accel-tcg-x86_64.so),
		// which the image needs on hosts without usable KVM; KVM loads no file of its own.
		Accel:  qemu.AccelTCG,
		Boot:   qemu.Boot{Kernel: g.Kernel, Initrd: g.Initrd, Cmdline: testguest.BaseCmdline},
		Serial: &qemu.Serial{Socket: filepath.Join(o.dir, "serial.sock"), LogFile: log},
		Agent:  &qemu.Agent{Socket: filepath.Join(o.dir, "qga.sock")},
		Disks:  []qemu.Disk{{ID: "data", Path: overlay, Format: qemu.FormatQCOW2}},
	}
	if o.full {
		cd := filepath.Join(o.dir, "cd.iso")
		if err := os.WriteFile(cd, make([]byte, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		spec.Disks = append(spec.Disks,
			qemu.Disk{ID: "scsi", Path: cd, Format: qemu.FormatRaw, Bus: qemu.BusSCSI, ReadOnly: true},
			qemu.Disk{ID: "cd", Path: cd, Format: qemu.FormatRaw, Bus: qemu.BusSATA, CDROM: true})
		spec.RNG = true
		spec.Balloon = &qemu.Balloon{StatsPeriodSeconds: 5}
		spec.Graphics = &qemu.Graphics{Socket: filepath.Join(o.dir, "vnc.sock")}
	}
	if o.tap != "" {
		spec.NICs = []qemu.NIC{{ID: "nic0", MAC: "52:54:00:12:34:56", TapName: o.tap, Queues: 1}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	vm, err := qemu.Start(ctx, spec, qemu.StartOptions{Binary: o.binary})
	if err != nil {
		t.Fatalf("start qemu: %v", err)
	}
	defer func() { _ = vm.Kill(context.Background()) }()
	poll.Until(t, bootTimeout, "guest ready marker on the serial console", func() (bool, string) {
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), testguest.MarkerReady), poll.Tail(string(b), 400)
	})
	if o.ready != nil {
		o.ready(vm)
	}
	if err := vm.Quit(ctx); err != nil {
		t.Fatalf("quit qemu: %v", err)
	}
}

// shortDir is a fresh folder under /tmp (unix socket paths must stay short), removed after t.
func shortDir(t *testing.T, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// writeScript writes an executable shell script.
func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}
