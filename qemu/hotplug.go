package qemu

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/vmlet/vmlet/qemu/qmp"
)

// claimSlot checks that id is free and returns the slot the device gets in namespace ns
// ("pcie", "scsi", "sata"): want if it is free, else (want == 0) the lowest free one.
// Callers hold devMu and record the device once it is attached.
func (vm *VM) claimSlot(id, ns string, want int) (int, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	used := map[int]bool{}
	for _, d := range vm.disks {
		if d.ID == id {
			return 0, ErrDeviceExists
		}
		if d.namespace() == ns {
			used[d.Port] = true
		}
	}
	for _, n := range vm.nics {
		if n.ID == id {
			return 0, ErrDeviceExists
		}
		if ns == "pcie" {
			used[n.Port] = true
		}
	}
	limit := vm.rootPorts
	switch ns {
	case "scsi":
		limit = maxSCSITargets
	case "sata":
		limit = maxSATAPorts
	}
	if want != 0 {
		if want > limit || used[want] {
			return 0, fmt.Errorf("%w: %s slot %d is taken or out of range (%d slots)", ErrNoFreePort, ns, want, limit)
		}
		return want, nil
	}
	for p := 1; p <= limit; p++ {
		if !used[p] {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%w: all %d %s slots are taken", ErrNoFreePort, limit, ns)
}

func (vm *VM) recordDisk(d Disk) {
	d.Files = nil // the caller owns them; QEMU has its own copies
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.disks = append(vm.disks, d)
}

func (vm *VM) recordNIC(n NIC) {
	n.TapFDs = nil // the caller owns them; QEMU has its own copies
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.nics = append(vm.nics, n)
}

func (vm *VM) disk(id string) (Disk, bool) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	i := slices.IndexFunc(vm.disks, func(d Disk) bool { return d.ID == id })
	if i < 0 {
		return Disk{}, false
	}
	return vm.disks[i], true
}

func (vm *VM) nic(id string) (NIC, bool) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	i := slices.IndexFunc(vm.nics, func(n NIC) bool { return n.ID == id })
	if i < 0 {
		return NIC{}, false
	}
	return vm.nics[i], true
}

func (vm *VM) forgetDevice(id string) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.disks = slices.DeleteFunc(vm.disks, func(d Disk) bool { return d.ID == id })
	vm.nics = slices.DeleteFunc(vm.nics, func(n NIC) bool { return n.ID == id })
}

// Disks returns the attached disks in attach order, each with its slot in Port.
func (vm *VM) Disks() []Disk {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return slices.Clone(vm.disks)
}

// NICs returns the attached NICs in attach order, each with its root port in Port (TapFDs
// are not kept).
func (vm *VM) NICs() []NIC {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return slices.Clone(vm.nics)
}

// deviceDel asks the guest to release device id and waits until QEMU reports it deleted.
// DEVICE_DELETED fires twice for virtio devices (first for /machine/peripheral/ID/
// virtio-backend): only the event for the device itself counts. QMP: device_del.
//
// A guest may take longer than ctx allows (or ignore the request until it can act on it): the
// request then stays pending in QEMU, which may refuse a second device_del ("already in the
// process of unplug"), and once the guest released the device a second one fails with
// DeviceNotFound — the unplug could then never complete (its netdev or block nodes stayed).
// So a later call for the same device does not ask again: it waits for the event, or finds the
// device already gone (released while nobody waited: the event went unheard) with qom-list.
// Callers hold devMu.
func (vm *VM) deviceDel(ctx context.Context, id string) error {
	path := "/machine/peripheral/" + id
	events, unsub := vm.mon.Subscribe(func(e qmp.Event) bool {
		if e.Name != "DEVICE_DELETED" {
			return false
		}
		var d struct {
			Device string `json:"device"`
			Path   string `json:"path"`
		}
		return json.Unmarshal(e.Data, &d) == nil && d.Device == id && d.Path == path
	})
	defer unsub()
	if vm.unplugging[id] {
		gone, err := vm.peripheralGone(ctx, id)
		if err != nil {
			return err
		}
		if gone {
			delete(vm.unplugging, id)
			return nil
		}
	} else {
		if err := vm.execute(ctx, "device_del", map[string]any{"id": id}, nil); err != nil {
			return err
		}
		if vm.unplugging == nil {
			vm.unplugging = map[string]bool{}
		}
		vm.unplugging[id] = true
	}
	select {
	case _, ok := <-events:
		if !ok {
			return fmt.Errorf("wait for DEVICE_DELETED %s: %w", id, ErrExited)
		}
		delete(vm.unplugging, id)
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for DEVICE_DELETED %s: %w: %w", id, ErrUnplugPending, ctx.Err())
	}
}

// peripheralGone reports whether device id is no longer among QEMU's user-created devices.
// QMP: qom-list /machine/peripheral.
func (vm *VM) peripheralGone(ctx context.Context, id string) (bool, error) {
	var props []struct {
		Name string `json:"name"`
	}
	if err := vm.execute(ctx, "qom-list", map[string]any{"path": "/machine/peripheral"}, &props); err != nil {
		return false, err
	}
	return !slices.ContainsFunc(props, func(p struct {
		Name string `json:"name"`
	}) bool {
		return p.Name == id
	}), nil
}

// MigrationSpec returns the spec a migration target needs: the source's spec with the disks
// and NICs attached now (hotplugged ones included, unplugged ones gone), the vCPU sockets and
// virtio-mem requested size of now (a CPU unplug still pending counts as present), every slot pinned,
// the same number of root ports, the machine type and CPU model actually used, and Incoming
// set. The caller must still give the target its own socket paths (Serial, Agent) and, for
// NICs that used TapFDs and disks that used Files, files of its own.
func (vm *VM) MigrationSpec() Spec {
	s := *cloneSpec(&vm.spec)
	s.Disks, s.NICs = vm.Disks(), vm.NICs()
	pcie := len(s.NICs)
	for _, d := range s.Disks {
		if d.namespace() == "pcie" {
			pcie++
		}
	}
	s.HotplugPorts = vm.rootPorts - pcie
	s.SCSI = vm.spec.needsSCSI()
	s.Machine, s.CPU.Model = vm.resolved.Machine, vm.resolved.CPUModel
	s.Incoming, s.StartPaused = true, false
	vm.liveResources(&s)
	return s
}
