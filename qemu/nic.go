package qemu

import (
	"context"
	"fmt"
	"os"

	"github.com/vmlet/vmlet/internal/revert"
)

// AddNIC hotplugs a virtio-net-pci NIC on a free PCIe root port (n.Port, or the first free
// one): the tap fds go to QEMU over SCM_RIGHTS (getfd), then netdev_add type=tap (vhost off)
// and device_add. With TapName, QEMU opens the tap itself. Failed steps are undone; once
// begun, the steps run to the end even if ctx is cancelled (committed). The caller
// keeps ownership of n.TapFDs and may close them when AddNIC returns.
//
// QMP: getfd (per queue), netdev_add, device_add.
func (vm *VM) AddNIC(ctx context.Context, n NIC) error {
	if err := n.validate("nic"); err != nil {
		return err
	}
	vm.devMu.Lock()
	defer vm.devMu.Unlock()
	port, err := vm.claimSlot(n.ID, "pcie", n.Port)
	if err != nil {
		return fmt.Errorf("add nic %s: %w", n.ID, err)
	}
	n.Port = port
	ctx, cancel := committed(ctx)
	defer cancel()
	return vm.attachNIC(ctx, n)
}

// attachNIC adds n (Port set) over QMP and records it. Shared by Start's cold plug and
// AddNIC.
func (vm *VM) attachNIC(ctx context.Context, n NIC) error {
	r := revert.New()
	defer r.Fail()
	consumed := false // netdev_add takes the getfd'd fds out of the monitor's table
	var names []string
	for q, f := range n.TapFDs {
		name := tapFDName(n.ID, q)
		if err := vm.getfd(ctx, name, f); err != nil {
			return fmt.Errorf("add nic %s: %w", n.ID, err)
		}
		names = append(names, name)
		r.Add(func() {
			if !consumed {
				vm.undo("closefd", map[string]any{"fdname": name})
			}
		})
	}
	if err := vm.execute(ctx, "netdev_add", netdevArgs(n, names), nil); err != nil {
		return fmt.Errorf("add nic %s: %w", n.ID, err)
	}
	consumed = true
	r.Add(func() { vm.undo("netdev_del", map[string]any{"id": netdevID(n.ID)}) })
	if err := vm.execute(ctx, "device_add", nicDeviceArgs(n, n.Port), nil); err != nil {
		return fmt.Errorf("add nic %s: %w", n.ID, err)
	}
	r.Success()
	vm.recordNIC(n)
	vm.log.Info("nic attached", "id", n.ID, "port", n.Port, "queues", n.queues())
	return nil
}

// RemoveNIC hot-unplugs a NIC: device_del, wait for DEVICE_DELETED of this id, netdev_del
// (which closes QEMU's tap fds). QMP: device_del, event DEVICE_DELETED, netdev_del.
func (vm *VM) RemoveNIC(ctx context.Context, id string) error {
	vm.devMu.Lock()
	defer vm.devMu.Unlock()
	if _, ok := vm.nic(id); !ok {
		return fmt.Errorf("remove nic %s: %w", id, ErrUnknownDevice)
	}
	if err := vm.deviceDel(ctx, id); err != nil {
		return fmt.Errorf("remove nic %s: %w", id, err)
	}
	vm.forgetDevice(id)
	if err := vm.execute(ctx, "netdev_del", map[string]any{"id": netdevID(id)}, nil); err != nil {
		return fmt.Errorf("remove nic %s: %w", id, err)
	}
	vm.log.Info("nic detached", "id", id)
	return nil
}

// getfd hands f to QEMU under name. QMP: getfd with the fd in SCM_RIGHTS.
func (vm *VM) getfd(ctx context.Context, name string, f *os.File) error {
	select {
	case <-vm.proc.done:
		return fmt.Errorf("run getfd: %w", ErrExited)
	default:
	}
	if err := vm.mon.ExecuteWithFiles(ctx, "getfd", map[string]any{"fdname": name}, nil, f); err != nil {
		return fmt.Errorf("run getfd %s: %w", name, err)
	}
	return nil
}
