package translate

import "errors"

// ErrUnsupported marks a VMI that asks for something vmlet cannot do (yet). The reconciler
// reports it as Synchronized=False with reason Unsupported and fails the VMI without starting
// anything.
var ErrUnsupported = errors.New("unsupported")

// SpecError is a problem with one field of a VMI spec found while translating it.
type SpecError struct {
	Field  string // JSON path, e.g. "spec.volumes[0].containerDisk"
	Reason string
	// Err is ErrUnsupported, the cause (e.g. a *storage.VolumeError, whose storage.Reason the
	// VMI shows), or nil for an invalid value.
	Err error
}

func (e *SpecError) Error() string { return e.Field + ": " + e.Reason }
func (e *SpecError) Unwrap() error { return e.Err }
