package launcher

import (
	"context"
	"errors"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/qmp"
)

// ErrorDomain is the ErrorInfo domain of the launcher's errors.
const ErrorDomain = "launcher.vmlet.io"

// reasons maps sentinels to their wire reason and gRPC code. The first match (errors.Is, in
// this order) wins; driver sentinels are folded into the launcher's own.
var reasons = []struct {
	name string
	code codes.Code
	err  error
	also []error // driver/client sentinels that mean the same
}{
	{"INVALID_CONFIG", codes.InvalidArgument, ErrInvalidConfig, nil},
	{"INVALID_SPEC", codes.InvalidArgument, ErrInvalidSpec, []error{qemu.ErrInvalidSpec, qemu.ErrKVMUnavailable}},
	{"INVALID_REQUEST", codes.InvalidArgument, ErrInvalidRequest, nil},
	{"NO_DOMAIN", codes.FailedPrecondition, ErrNoDomain, nil},
	{"DOMAIN_EXISTS", codes.AlreadyExists, ErrDomainExists, nil},
	{"UNKNOWN_DEVICE", codes.NotFound, ErrUnknownDevice, []error{qemu.ErrUnknownDevice}},
	{"DEVICE_EXISTS", codes.AlreadyExists, ErrDeviceExists, []error{qemu.ErrDeviceExists}},
	{"TAP_NOT_FOUND", codes.NotFound, ErrTapNotFound, nil},
	{"NO_FREE_PORT", codes.ResourceExhausted, ErrNoFreePort, []error{qemu.ErrNoFreePort}},
	{"NOT_HOTPLUGGABLE", codes.FailedPrecondition, ErrNotHotpluggable, []error{qemu.ErrNotHotpluggable}},
	{"AGENT_NOT_CONNECTED", codes.FailedPrecondition, ErrAgentNotConnected, nil},
	{"AGENT_ERROR", codes.Aborted, ErrAgentCommand, nil},
	{"AGENT_BUSY", codes.Unavailable, ErrAgentBusy, nil},
	{"EXEC_TIMEOUT", codes.DeadlineExceeded, ErrExecTimeout, nil},
	{"NO_DISPLAY", codes.FailedPrecondition, ErrNoDisplay, []error{qemu.ErrNoDisplay}},
	{"UNSAFE", codes.FailedPrecondition, ErrUnsafe, []error{qemu.ErrUnsafe}},
	{"MIGRATION_FAILED", codes.Aborted, ErrMigrationFailed, []error{qemu.ErrMigrationFailed, qemu.ErrMirrorFailed}},
	{"QEMU_EXITED", codes.FailedPrecondition, ErrQEMUExited, []error{qemu.ErrExited, qmp.ErrDisconnected}},
	{"TERMINATING", codes.Unavailable, ErrTerminating, nil},
	{"WRONG_STATE", codes.FailedPrecondition, ErrWrongState, []error{qemu.ErrWrongState}},
	{"EVENTS_LOST", codes.OutOfRange, ErrEventsLost, nil},
	{"UNPLUG_PENDING", codes.Unavailable, ErrUnplugPending, []error{qemu.ErrUnplugPending}},
	{"TIMEOUT", codes.DeadlineExceeded, ErrTimeout, []error{qmp.ErrTimeout, context.DeadlineExceeded}},
	{"QMP_ERROR", codes.Internal, ErrQMP, nil},
}

// toStatus turns a server-side error into a gRPC status error with an ErrorInfo detail.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code, reason := codes.Unknown, ""
	md := map[string]string{}
	if qe, ok := errors.AsType[*qmp.Error](err); ok {
		code, reason = codes.Internal, "QMP_ERROR"
		md["class"] = qe.Class
	}
	if se, ok := errors.AsType[*StepError](err); ok {
		md["step"] = se.Step
	}
	if pe, ok := errors.AsType[*guestPIDError](err); ok {
		md["pid"] = strconv.Itoa(pe.pid)
	}
	if errors.Is(err, context.Canceled) {
		code = codes.Canceled
	}
	for _, r := range reasons {
		match := errors.Is(err, r.err)
		for _, a := range r.also {
			match = match || errors.Is(err, a)
		}
		if match {
			code, reason = r.code, r.name
			break
		}
	}
	st := status.New(code, err.Error())
	if reason == "" && len(md) == 0 {
		return st.Err()
	}
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: md}); derr == nil {
		st = d
	}
	return st.Err()
}

// fromStatus turns a gRPC error into a *RemoteError (nil stays nil; non-status errors, e.g. a
// dial failure, pass through wrapped).
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	re := &RemoteError{Code: st.Code().String(), Message: st.Message()}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			re.Reason, re.Metadata = info.GetReason(), info.GetMetadata()
		}
	}
	return re
}
