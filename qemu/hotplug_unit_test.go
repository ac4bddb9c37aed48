package qemu

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/vmlet/vmlet/qemu/qmp/qmptest"
)

// TestHotplugCompletesWhenCallerGoes: the caller's context ends while the first blockdev-add
// (or getfd) is with QEMU, as when the node agent is SIGKILLed mid-hotplug and the launcher
// sees its RPC cancelled. The sequence still runs to the end and the device is recorded:
// stopped there, QEMU would complete the in-flight command after the undo ran and every later
// try of the id would fail with "Duplicate nodes" (seen in the fault matrix under load).
func TestHotplugCompletesWhenCallerGoes(t *testing.T) {
	vm, srv := fakeVM(t)
	vm.rootPorts = 8
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	goes := func(qmptest.Command) (any, *qmptest.Error) { once.Do(cancel); return map[string]any{}, nil }
	srv.On("blockdev-add").Do(goes)
	srv.On("device_add")
	img := filepath.Join(t.TempDir(), "hot.raw")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := vm.AddDisk(ctx, Disk{ID: "hot", Path: img, Format: FormatRaw}); err != nil {
		t.Fatalf("AddDisk with its caller gone mid-way: %v", err)
	}
	if _, ok := vm.disk("hot"); !ok {
		t.Error("the disk was added but not recorded")
	}
	var names []string
	for _, c := range srv.Commands() {
		if c.Name != "qmp_capabilities" {
			names = append(names, c.Name)
		}
	}
	if len(names) != 3 || names[0] != "blockdev-add" || names[1] != "blockdev-add" || names[2] != "device_add" {
		t.Errorf("commands %v, want blockdev-add ×2 and device_add, nothing undone", names)
	}
}
