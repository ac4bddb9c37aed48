package launcher

import (
	"errors"
	"fmt"
)

// Sentinel errors. The server sends them as gRPC status codes with an ErrorInfo detail
// (domain ErrorDomain, reason below); the Client turns them back into a *RemoteError that
// unwraps to the same sentinel, so callers on both sides use errors.Is.
var (
	// ErrInvalidConfig: the launcher's own configuration (flags) is unusable.
	ErrInvalidConfig = errors.New("invalid launcher config")
	// ErrInvalidSpec: the domain spec, disk or NIC failed validation. InvalidArgument.
	ErrInvalidSpec = errors.New("invalid domain spec")
	// ErrInvalidRequest: a request field is malformed (bad JSON for QMP, missing id).
	ErrInvalidRequest = errors.New("invalid request")
	// ErrNoDomain: no Sync (or PrepareMigrationTarget) has started a domain yet.
	ErrNoDomain = errors.New("no domain defined")
	// ErrDomainExists: Sync with a spec other than the running one.
	ErrDomainExists = errors.New("a different domain is defined")
	// ErrWrongState: the domain is not in a state where the operation makes sense.
	ErrWrongState = errors.New("wrong domain state")
	// ErrUnknownDevice: no disk or NIC with that id.
	ErrUnknownDevice = errors.New("unknown device")
	// ErrDeviceExists: a disk or NIC with that id is attached already.
	ErrDeviceExists = errors.New("device already attached")
	// ErrNoFreePort: every hotplug slot is taken.
	ErrNoFreePort = errors.New("no free hotplug slot")
	// ErrNotHotpluggable: the device's bus cannot be hotplugged.
	ErrNotHotpluggable = errors.New("device not hotpluggable")
	// ErrTapNotFound: a NIC names a tap device that does not exist (in its namespace).
	ErrTapNotFound = errors.New("tap device not found")
	// ErrAgentNotConnected: the guest agent does not answer (not started, or gone).
	ErrAgentNotConnected = errors.New("guest agent not connected")
	// ErrAgentCommand: the guest agent answered a command with an error
	// (RemoteError.Metadata["class"]).
	ErrAgentCommand = errors.New("guest agent command failed")
	// ErrAgentBusy: a guest agent command was not sent: earlier commands held the agent's
	// channel longer than the launcher waits in line (5 s). Says nothing about the agent's
	// health; retry. Unavailable.
	ErrAgentBusy = errors.New("guest agent busy")
	// ErrExecTimeout: GuestExec's timeout passed before the guest process exited. The process
	// keeps running in the guest (qemu-ga has no command to kill it);
	// RemoteError.Metadata["pid"] is its guest pid. DeadlineExceeded.
	ErrExecTimeout = errors.New("guest process did not exit in time")
	// ErrMigrationFailed: the migration ended failed or cancelled.
	ErrMigrationFailed = errors.New("migration failed")
	// ErrUnsafe: the operation is known to damage the guest in this configuration (e.g.
	// auto-converge under TCG, see qemu.VM.SetMigrationCaps).
	ErrUnsafe = errors.New("unsafe in this configuration")
	// ErrQMP: QEMU answered a command with a QMP error (RemoteError.Metadata["class"]).
	ErrQMP = errors.New("qmp command failed")
	// ErrNoDisplay: the domain has no display (DomainSpec.graphics false). FailedPrecondition.
	ErrNoDisplay = errors.New("no display")
	// ErrQEMUExited: QEMU is gone; the launcher is about to exit.
	ErrQEMUExited = errors.New("qemu exited")
	// ErrTerminating: the launcher is shutting down and takes no new work.
	ErrTerminating = errors.New("launcher terminating")
	// ErrEventsLost: WatchEvents asked to resume after events that are no longer retained;
	// resync with GetDomain and watch from its last_event_seq.
	ErrEventsLost = errors.New("events no longer retained")
	// ErrUnplugPending: the guest has not released a device asked to unplug yet; the request
	// stays pending and a later UnplugDisk/UnplugNIC waits for it again. Unavailable.
	ErrUnplugPending = errors.New("unplug pending: the guest has not released the device yet")
	// ErrTimeout: an operation hit its deadline.
	ErrTimeout = errors.New("timeout")
)

// StepError names the step of a step list that failed: What is the list ("start launcher",
// "start domain"), Step the step ("prepare-dirs", "start-qemu", ...).
type StepError struct {
	What string
	Step string
	Err  error
}

func (e *StepError) Error() string { return fmt.Sprintf("%s: step %s: %v", e.What, e.Step, e.Err) }

func (e *StepError) Unwrap() error { return e.Err }

// guestPIDError carries the guest pid of an exec into RemoteError.Metadata["pid"].
type guestPIDError struct {
	pid int
	err error
}

func (e *guestPIDError) Error() string { return e.err.Error() }

func (e *guestPIDError) Unwrap() error { return e.err }

// RemoteError is an error the launcher returned over the API. It unwraps to the sentinel
// named by Reason (errors.Is(err, launcher.ErrNoDomain)); Metadata carries details: the QMP
// error "class", the failed "step" of a domain start, the guest "pid" of a timed-out exec.
type RemoteError struct {
	Code     string // gRPC status code name, e.g. "FailedPrecondition"
	Reason   string // e.g. "NO_DOMAIN"; empty if the server sent no ErrorInfo
	Message  string
	Metadata map[string]string
}

func (e *RemoteError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("launcher: %s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("launcher: %s (%s): %s", e.Reason, e.Code, e.Message)
}

// Unwrap returns the sentinel for Reason (nil if unknown).
func (e *RemoteError) Unwrap() error {
	for _, r := range reasons {
		if r.name == e.Reason {
			return r.err
		}
	}
	if e.Code == "DeadlineExceeded" {
		return ErrTimeout
	}
	return nil
}
