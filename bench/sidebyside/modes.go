package main

import (
	"context"
)

// Mode names, as they appear in the results.
const (
	modeVmlet   = "vmlet"
	modeLibvirt = "libvirt"
	modeBare    = "bare"
)

// stack starts VMs one way. prepare does the untimed part (a launcher process per VM, sockets
// bound for bare QEMU, the domain XML for libvirt); start is timed and returns once the
// domain runs.
type stack interface {
	name() string
	prepare(ctx context.Context, g Guest) (pending, error)
}

type pending interface {
	start(ctx context.Context) (vm, error)
	// discard undoes prepare when start is not called or failed.
	discard(ctx context.Context) error
}

// vm is a running domain.
type vm interface {
	// console is the serial console socket QEMU serves.
	console() string
	pause(ctx context.Context) error
	resume(ctx context.Context) error
	// state reads the domain state through the stack (GetDomain, DomainGetState, query-status).
	state(ctx context.Context) error
	// stop kills QEMU and waits for it (and the launcher) to be gone.
	stop(ctx context.Context) error
	qemuPID() int
	// controlPIDs are the per-VM control-plane processes (the launcher); nil for libvirt,
	// whose daemons are shared (libvirtStack.daemonPIDs).
	controlPIDs() []int
}
