package qemu

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Match them with errors.Is; the typed errors below wrap them.
var (
	// ErrInvalidSpec: the spec (or a disk/NIC given to AddDisk/AddNIC) failed validation.
	ErrInvalidSpec = errors.New("invalid spec")
	// ErrKVMUnavailable: the spec asks for KVM but the host cannot really run KVM guests.
	ErrKVMUnavailable = errors.New("kvm not usable on this host")
	// ErrExited: the QEMU process has exited; the operation cannot run.
	ErrExited = errors.New("qemu exited")
	// ErrNoFreePort: every PCIe root port is taken; start the VM with more HotplugPorts.
	ErrNoFreePort = errors.New("no free pcie root port")
	// ErrNotHotpluggable: the device's bus has no hotplug (SATA/AHCI) or the VM lacks the
	// controller (SCSI without virtio-scsi).
	ErrNotHotpluggable = errors.New("device not hotpluggable")
	// ErrDeviceExists: a disk or NIC with this id is already attached.
	ErrDeviceExists = errors.New("device already attached")
	// ErrUnknownDevice: no disk or NIC with this id is attached.
	ErrUnknownDevice = errors.New("unknown device")
	// ErrUnplugPending: the guest has not released a device asked to unplug yet; the request
	// stays pending and a later RemoveDisk/RemoveNIC waits for it (never asks again).
	ErrUnplugPending = errors.New("unplug pending: the guest has not released the device yet")
	// ErrMigrationFailed: a migration ended in status failed or cancelled.
	ErrMigrationFailed = errors.New("migration failed")
	// ErrWrongState: the VM is not in a state where the operation makes sense.
	ErrWrongState = errors.New("wrong vm state")
	// ErrMirrorFailed: a disk mirror (block job) of a non-shared-storage migration failed or
	// ended before it was ready.
	ErrMirrorFailed = errors.New("disk mirror failed")
	// ErrUnsafe: the operation is known to damage the guest in this configuration (see the
	// operation's documentation for the evidence).
	ErrUnsafe = errors.New("unsafe in this configuration")
	// ErrUnsafePath: a log vmlet opens in a VM's run folder (the serial log, the QMP log) or
	// one of its folders is a symlink or not what it should be; someone with the folder
	// owner's uid planted it. Nothing was opened through it.
	ErrUnsafePath = errors.New("symlink or foreign file in the run folder")
)

// SpecError says which field of a spec is wrong and why. It wraps ErrInvalidSpec.
type SpecError struct {
	Field  string // e.g. "disks[1].id"
	Value  string // the offending value, shortened to 64 bytes and quoted when printed
	Reason string
}

func (e *SpecError) Error() string {
	return fmt.Sprintf("validate spec: %s %q: %s", e.Field, shorten(e.Value, 64), e.Reason)
}

// Unwrap lets errors.Is(err, ErrInvalidSpec) match.
func (e *SpecError) Unwrap() error { return ErrInvalidSpec }

// StepError reports which named Start step failed. Stderr holds the tail of QEMU's standard
// error when the process had been started, which usually says why QEMU refused.
type StepError struct {
	Step   string
	Err    error
	Stderr string
}

func (e *StepError) Error() string {
	msg := fmt.Sprintf("start vm: step %s: %v", e.Step, e.Err)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += " (qemu stderr: " + shorten(s, 512) + ")"
	}
	return msg
}

func (e *StepError) Unwrap() error { return e.Err }

// MigrationError is a migration that ended badly: Status is QEMU's final status ("failed",
// "cancelled") and Desc its error-desc if any. It wraps ErrMigrationFailed.
type MigrationError struct {
	Status string
	Desc   string
}

func (e *MigrationError) Error() string {
	if e.Desc == "" {
		return fmt.Sprintf("migrate: status %s", e.Status)
	}
	return fmt.Sprintf("migrate: status %s: %s", e.Status, e.Desc)
}

// Unwrap lets errors.Is(err, ErrMigrationFailed) match.
func (e *MigrationError) Unwrap() error { return ErrMigrationFailed }

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// MirrorError is a disk mirror that failed: Disk is the disk id, Event the QMP event that
// said so (BLOCK_JOB_ERROR, BLOCK_JOB_COMPLETED with an error, BLOCK_JOB_CANCELLED) and Desc
// QEMU's message if any. It wraps ErrMirrorFailed.
type MirrorError struct {
	Disk  string
	Event string
	Desc  string
}

func (e *MirrorError) Error() string {
	if e.Desc == "" {
		return fmt.Sprintf("mirror disk %s: %s", e.Disk, e.Event)
	}
	return fmt.Sprintf("mirror disk %s: %s: %s", e.Disk, e.Event, e.Desc)
}

// Unwrap lets errors.Is(err, ErrMirrorFailed) match.
func (e *MirrorError) Unwrap() error { return ErrMirrorFailed }
