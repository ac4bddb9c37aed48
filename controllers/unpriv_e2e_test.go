package controllers_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/qemu/qmp"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/procstatus"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestVMIUnprivileged: a VMI with a NIC (the default pod network binding) and an emptyDisk
// runs with its launcher and QEMU as the launcher user (107:107), no supplementary groups, no
// capability in any set and no_new_privs; QEMU under its seccomp sandbox. From inside QEMU's
// credentials (QMP blockdev-add), the VMI's own disk opens, but files it was not given do not:
// a root-only file, the agent's files in the VMI's own run folder, and the shared image cache
// for writing. The tap the agent handed over carries the guest's traffic counters. Delete
// leaves nothing behind.
func TestVMIUnprivileged(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	a := startAgent(t, agentOptions{})
	defer a.stop(t)
	ctx := context.Background()

	secret := filepath.Join(nodeDir(t), "secret.img")
	if err := os.WriteFile(secret, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	vmi := newVMI("unpriv")
	vmi.Spec.Volumes = []vmletv1.Volume{
		{Name: "scratch", VolumeSource: vmletv1.VolumeSource{EmptyDisk: &vmletv1.EmptyDiskSource{Capacity: resource.MustParse("16Mi")}}},
	}
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	uid := string(vmi.UID)
	running := waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 3*time.Minute)
	waitSerial(t, consoleLog(running), testguest.MarkerReady)
	st, err := a.runtime.State(uid)
	if err != nil {
		t.Fatal(err)
	}
	launcherPid, qemuPid := st.Pid, int(running.Status.Launcher.PID)
	for name, pid := range map[string]int{"launcher": launcherPid, "qemu": qemuPid} {
		ps, err := procstatus.Read(pid)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range ps.Unprivileged(launcherUser.UID, launcherUser.GID) {
			t.Errorf("%s (pid %d): %s", name, pid, bad)
		}
		if name == "qemu" && ps.Seccomp != 2 {
			t.Errorf("qemu Seccomp=%d, want 2 (filter: -sandbox on)", ps.Seccomp)
		}
	}

	paths := launcher.Paths{Root: filepath.Join(runRoot, uid)}
	mon, err := qmp.Dial(ctx, paths.DebugSocket(), qmp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	open := func(node, file string, readOnly bool) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err := mon.Execute(ctx, "blockdev-add", map[string]any{
			"node-name": node, "driver": "raw", "read-only": readOnly,
			"file": map[string]any{"driver": "file", "filename": file, "locking": "off"},
		}, nil)
		if err == nil {
			_ = mon.Execute(ctx, "blockdev-del", map[string]any{"node-name": node}, nil)
		}
		return err
	}
	own := filepath.Join(volumeRoot, uid, "disks", "scratch.qcow2")
	if err := open("own", own, true); err != nil {
		t.Errorf("QEMU cannot open its own emptyDisk %s: %v", own, err)
	}
	kernel := filepath.Join(volumeRoot, uid, "boot", "kernel") // a hard link into the image cache
	if err := open("kernel-ro", kernel, true); err != nil {
		t.Errorf("QEMU cannot read its kernel %s: %v", kernel, err)
	}
	for _, c := range []struct {
		what, path string
		readOnly   bool
	}{
		{"a root-only (0600) file", secret, true},
		{"/etc/shadow", "/etc/shadow", true},
		{"the agent's pid file in its run folder", filepath.Join(paths.Root, "launcher.pid"), true},
		{"the shared image cache, for writing", kernel, false},
	} {
		err := open("denied", c.path, c.readOnly)
		var qe *qmp.Error
		if !errors.As(err, &qe) || !strings.Contains(qe.Desc, "Permission denied") {
			t.Errorf("QEMU opening %s (%s, read-only %v): %v, want Permission denied", c.what, c.path, c.readOnly, err)
		}
	}

	lc, err := launcher.Dial(ctx, paths.ReadySocket())
	if err != nil {
		t.Fatal(err)
	}
	stats, err := lc.DomainStats(ctx)
	lc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(stats.GetNet()) != 1 || stats.GetNet()[0].GetTxBytes()+stats.GetNet()[0].GetRxBytes() == 0 {
		t.Errorf("tap counters read through the handed /proc/net/dev: %v, want one NIC with traffic (DHCP)", stats.GetNet())
	}

	if err := env.Client.Delete(ctx, running); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, key)
	assertNothingLeft(t, uid, launcherPid, qemuPid)
}
