package network

import (
	"errors"
	"fmt"

	"github.com/vmlet/vmlet/network/dhcp"
)

// Sentinel errors. Match them with errors.Is; FieldError wraps the validation ones.
var (
	// ErrInvalidSpec: a spec or configuration failed validation. Every FieldError matches it.
	ErrInvalidSpec = errors.New("invalid network spec")
	// ErrInvalidMAC: a MAC address is malformed, multicast or all zeros.
	ErrInvalidMAC = errors.New("invalid mac address")
	// ErrInvalidPort: a forwarded port is outside 1..65535 or listed twice.
	ErrInvalidPort = errors.New("invalid port")
	// ErrInvalidProtocol: a forwarded port's protocol is neither TCP nor UDP.
	ErrInvalidProtocol = errors.New("invalid protocol")
	// ErrDuplicateInterface: two interfaces (or two networks) share a name, or two interfaces
	// use the same network.
	ErrDuplicateInterface = errors.New("duplicate interface")
	// ErrUnknownNetwork: an interface names a network that the spec does not define.
	ErrUnknownNetwork = errors.New("unknown network")
	// ErrUnsupportedBinding: the binding method is not masquerade or bridge, or the
	// combination is not supported (ports on a bridge binding, no pod address to move).
	ErrUnsupportedBinding = errors.New("unsupported binding")
	// ErrSubnetConflict: the node subnet overlaps a route that vmlet does not own.
	ErrSubnetConflict = errors.New("node subnet conflicts with an existing route")
	// ErrSubnetExhausted: every address of the node subnet is in use.
	ErrSubnetExhausted = errors.New("node subnet exhausted")
	// ErrNameCollision: a link vmlet would create exists but belongs to something else.
	ErrNameCollision = errors.New("link name taken by another owner")
	// ErrNoPodAddress: the pod interface has no IPv4 address (or no default route) to use.
	ErrNoPodAddress = errors.New("pod interface has no usable address")
	// ErrNotTap: OpenTap's link exists but is not a tap.
	ErrNotTap = errors.New("link is not a tap")
	// ErrClosed: the DHCP server or attachment was closed (dhcp.ErrClosed).
	ErrClosed = dhcp.ErrClosed
)

// FieldError says which field is wrong and why. It matches ErrInvalidSpec and its Err (one of
// the sentinels above) with errors.Is.
type FieldError struct {
	Field string // e.g. "interfaces[1].macAddress"
	Value string // the offending value
	Err   error  // the sentinel, e.g. ErrInvalidMAC
	// Detail says more when the sentinel alone does not ("multicast bit set").
	Detail string
}

func (e *FieldError) Error() string {
	msg := fmt.Sprintf("validate %s %q: %v", e.Field, shorten(e.Value, 64), e.Err)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Unwrap lets errors.Is match both ErrInvalidSpec and the specific sentinel.
func (e *FieldError) Unwrap() []error { return []error{ErrInvalidSpec, e.Err} }

func fieldErr(field, value string, err error, detail string) *FieldError {
	return &FieldError{Field: field, Value: value, Err: err, Detail: detail}
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// ErrSubnetInUse is returned by Node.CheckPods when pods of another subnet are on the node:
// the node network cannot change its subnet under them.
var ErrSubnetInUse = errors.New("pods of another subnet are on the node")
