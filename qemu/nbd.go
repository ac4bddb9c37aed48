package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/vmlet/vmlet/internal/revert"
)

// Non-shared-storage migration, target side. The target is started with Spec.Incoming and
// disk files of its own (fresh overlays over the same base image, fresh empty disks of the
// same size); before the memory migration it serves those disks over NBD so that the source
// can mirror into them:
//
//	target: ExportDisks(sock, ids)         nbd-server-start, block-export-add per disk
//	source: StartMirrors / WaitMirrorsReady (mirror.go), then Migrate
//	source: after completion, StopMirrors (the source must be done before the target runs)
//	target: StopNBDServer, then Resume     nbd-server-stop, cont
//
// QEMU activates an exported node although the VM is still "inmigrate" and defers the device's
// share permissions to the first cont, which is why the server must be stopped before Resume.

// ExportDisks starts QEMU's NBD server on the unix socket path and exports each attached disk
// in ids writable under the export name equal to its id (the format node, so writes land in
// the target's overlay or image). Only an incoming migration target may export (ErrWrongState
// otherwise); the ids must be attached, writable disks. On failure everything started is
// undone. The socket is removed by StopNBDServer or when QEMU exits.
//
// QMP: query-status, nbd-server-start {addr: {type: unix, data: {path}}}, block-export-add {type: nbd,
// writable: true} per disk.
func (vm *VM) ExportDisks(ctx context.Context, socket string, ids []string) error {
	return vm.ExportDisksTLS(ctx, socket, ids, "")
}

// ExportDisksTLS is ExportDisks with the NBD server behind TLS: tlsCreds is a tls-creds-x509
// server object (AddTLSCreds) whose CA the clients' certificates must come from.
//
// QMP: as ExportDisks, nbd-server-start with tls-creds.
func (vm *VM) ExportDisksTLS(ctx context.Context, socket string, ids []string, tlsCreds string) error {
	if err := checkSocketPath("nbd socket", socket); err != nil {
		return fmt.Errorf("export disks: %w", err)
	}
	if err := vm.checkMigrationDisks(ids); err != nil {
		return fmt.Errorf("export disks: %w", err)
	}
	st, err := vm.Status(ctx)
	if err != nil {
		return fmt.Errorf("export disks: %w", err)
	}
	if st.Status != "inmigrate" {
		return fmt.Errorf("export disks: %w: status %s, only an incoming migration target exports its disks", ErrWrongState, st.Status)
	}
	vm.devMu.Lock()
	defer vm.devMu.Unlock()
	vm.mu.Lock()
	running := vm.nbdSocket != ""
	vm.mu.Unlock()
	if running {
		return fmt.Errorf("export disks: %w: the nbd server runs already", ErrWrongState)
	}
	r := revert.New()
	defer r.Fail()
	// QEMU 7.2 takes the legacy SocketAddress here: {type, data: {path}}.
	addr := map[string]any{"addr": map[string]any{"type": "unix", "data": map[string]any{"path": socket}}}
	if tlsCreds != "" {
		addr["tls-creds"] = tlsCreds
	}
	if err := vm.execute(ctx, "nbd-server-start", addr, nil); err != nil {
		return fmt.Errorf("export disks: %w", err)
	}
	vm.mu.Lock()
	vm.files = append(vm.files, socket) // QEMU 7.2 leaves the socket file behind
	vm.mu.Unlock()
	r.Add(func() {
		vm.undo("nbd-server-stop", nil)
		_ = os.Remove(socket)
	})
	for _, id := range ids {
		args := map[string]any{
			"type": "nbd", "id": nbdExportID(id), "node-name": formatNodeName(id),
			"name": id, "writable": true,
		}
		if err := vm.execute(ctx, "block-export-add", args, nil); err != nil {
			return fmt.Errorf("export disks: disk %s: %w", id, err)
		}
	}
	r.Success()
	vm.mu.Lock()
	vm.nbdSocket, vm.exports = socket, slices.Clone(ids)
	vm.mu.Unlock()
	vm.log.Info("disks exported over nbd", "socket", socket, "disks", ids)
	return nil
}

// Exports returns the disk ids ExportDisks exported, nil when no NBD server runs.
func (vm *VM) Exports() []string {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return slices.Clone(vm.exports)
}

// StopNBDServer stops the NBD server started by ExportDisks (its exports go with it) and
// removes its socket. It is a no-op when none runs. Call it once the source has stopped its
// mirrors and before resuming the guest.
//
// QMP: nbd-server-stop.
func (vm *VM) StopNBDServer(ctx context.Context) error {
	vm.devMu.Lock()
	defer vm.devMu.Unlock()
	vm.mu.Lock()
	socket := vm.nbdSocket
	vm.mu.Unlock()
	if socket == "" {
		return nil
	}
	if err := vm.execute(ctx, "nbd-server-stop", nil, nil); err != nil {
		return fmt.Errorf("stop nbd server: %w", err)
	}
	vm.mu.Lock()
	vm.nbdSocket, vm.exports = "", nil
	vm.mu.Unlock()
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		vm.log.Warn("remove nbd socket", "path", socket, "err", err)
	}
	return nil
}

// checkMigrationDisks checks that ids is a non-empty list of distinct attached writable disks.
func (vm *VM) checkMigrationDisks(ids []string) error {
	if len(ids) == 0 {
		return fmt.Errorf("%w: no disks", ErrInvalidSpec)
	}
	for i, id := range ids {
		if err := checkID(fmt.Sprintf("disks[%d]", i), id); err != nil {
			return err
		}
		if slices.Index(ids, id) != i {
			return specErr(fmt.Sprintf("disks[%d]", i), id, "listed twice")
		}
		d, ok := vm.disk(id)
		if !ok {
			return fmt.Errorf("disk %s: %w", id, ErrUnknownDevice)
		}
		if d.ReadOnly || d.CDROM {
			return specErr(fmt.Sprintf("disks[%d]", i), id, "read-only disks are not copied (they must be identical on both nodes)")
		}
	}
	return nil
}
