package qemu

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmlet/vmlet/qemu/qmp"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestDiskHotplug: a virtio disk hotplugged into a running guest appears there (and is the
// right disk), wrong requests fail without leaving block nodes behind, and unplug removes it
// from the guest and from QEMU.
func TestDiskHotplug(t *testing.T) {
	files := testguest.Assets(t)
	vm := startGuest(t, guestSpec(t, guestOpts{hotplugPorts: 1, mutate: func(s *Spec) { s.SCSI = true }}))
	vm.waitReady(t)
	ctx := ctxT(t, opTimeout)

	from := vm.console.Len()
	hot := Disk{ID: "hot", Path: testguest.Overlay(t, files.DataDisk), Format: FormatQCOW2, BootIndex: 1}
	if err := vm.AddDisk(ctx, hot); err != nil {
		t.Fatal(err)
	}
	if _, err := vm.console.WaitFrom(ctx, from, testguest.MarkerDiskAdded+" vda"); err != nil {
		t.Fatal(err)
	}
	if got := vm.sh(t, "head -c 15 /dev/vda"); got != testguest.DataDiskLabel {
		t.Fatalf("hotplugged disk reads %q", got)
	}

	empty := filepath.Join(t.TempDir(), "not-qcow2.img")
	if err := os.WriteFile(empty, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	other := testguest.Overlay(t, files.DataDisk)
	for _, tt := range []struct {
		name string
		disk Disk
		want error
	}{
		{"duplicate id", Disk{ID: "hot", Path: other}, ErrDeviceExists},
		{"no free root port", Disk{ID: "more", Path: other}, ErrNoFreePort},
		{"sata", Disk{ID: "sata", Path: other, Bus: BusSATA}, ErrNotHotpluggable},
		{"invalid", Disk{ID: "Bad,Id", Path: other}, ErrInvalidSpec},
		// blockdev-add of the format node fails: the file node must be removed again.
		{"not qcow2", Disk{ID: "fmt", Path: empty, Format: FormatQCOW2, Bus: BusSCSI}, nil},
		// device_add fails (boot index taken): both nodes must be removed again.
		{"bootindex taken", Disk{ID: "boot", Path: other, Format: FormatQCOW2, Bus: BusSCSI, BootIndex: 1}, nil},
	} {
		err := vm.AddDisk(ctx, tt.disk)
		t.Logf("AddDisk %s: %v", tt.name, err)
		if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
			t.Errorf("AddDisk %s: %v, want %v", tt.name, err, tt.want)
		}
		if tt.want == nil {
			var qe *qmp.Error
			if !errors.As(err, &qe) {
				t.Errorf("AddDisk %s: %v, want a QMP error", tt.name, err)
			}
		}
	}
	nodes := blockNodes(t, vm)
	for _, n := range []string{"f_fmt", "d_fmt", "f_boot", "d_boot", "f_more", "f_sata"} {
		if nodes[n] {
			t.Errorf("node %s left behind after a failed AddDisk (nodes %v)", n, nodes)
		}
	}
	if !nodes["f_hot"] || !nodes["d_hot"] {
		t.Errorf("nodes of the attached disk missing: %v", nodes)
	}

	from = vm.console.Len()
	if err := vm.RemoveDisk(ctx, "hot"); err != nil {
		t.Fatal(err)
	}
	if _, err := vm.console.WaitFrom(ctx, from, testguest.MarkerDiskRemoved+" vda"); err != nil {
		t.Fatal(err)
	}
	if nodes := blockNodes(t, vm); nodes["f_hot"] || nodes["d_hot"] {
		t.Errorf("nodes left after RemoveDisk: %v", nodes)
	}
	if err := vm.RemoveDisk(ctx, "hot"); !errors.Is(err, ErrUnknownDevice) {
		t.Errorf("second RemoveDisk = %v, want ErrUnknownDevice", err)
	}
	if len(vm.Disks()) != 0 {
		t.Errorf("Disks() = %+v after unplug", vm.Disks())
	}
	// The freed root port takes a new disk.
	if err := vm.AddDisk(ctx, Disk{ID: "again", Path: other, Format: FormatQCOW2}); err != nil {
		t.Fatalf("AddDisk after unplug: %v", err)
	}
	if d := vm.Disks(); len(d) != 1 || d[0].Port != 1 {
		t.Errorf("Disks() = %+v, want one disk on root port 1", d)
	}
}

// blockNodes lists QEMU's named block nodes. QMP: query-named-block-nodes.
func blockNodes(t testing.TB, vm *testVM) map[string]bool {
	t.Helper()
	var nodes []struct {
		NodeName string `json:"node-name"`
	}
	if err := vm.Monitor().Execute(ctxT(t, opTimeout), "query-named-block-nodes", nil, &nodes); err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, n := range nodes {
		if !strings.HasPrefix(n.NodeName, "#") {
			m[n.NodeName] = true
		}
	}
	return m
}
