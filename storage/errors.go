package storage

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/vmlet/vmlet/storage/oci"
)

// Sentinels.
var (
	ErrInvalidVolume   = errors.New("invalid volume")
	ErrInvalidDisk     = errors.New("invalid disk")
	ErrUnknownVolume   = errors.New("disk refers to no volume")
	ErrUnknownClaim    = errors.New("unknown claim")
	ErrOutsideRoot     = errors.New("path outside the allowed root")
	ErrNotFound        = errors.New("volume file not found")
	ErrNotDiskFile     = errors.New("not a regular file or block device")
	ErrConflict        = errors.New("file exists with other content than planned")
	ErrNotStorageDir   = errors.New("folder was not made by storage")
	ErrUnsupportedMode = errors.New("unsupported")
)

// Reasons for VMI conditions (image failures carry oci's reasons).
const (
	ReasonInvalidVolume  = "InvalidVolume"
	ReasonVolumeNotFound = "VolumeNotFound"
	ReasonPathNotAllowed = "HostPathNotAllowed"
	ReasonStorageFailed  = "StorageFailed"
	// ReasonNoSpace: the node's storage folder (volumes, image cache) is full or over quota.
	ReasonNoSpace = "InsufficientStorage"
)

// NoSpace reports whether err is the node's storage running out of room (ENOSPC, EDQUOT):
// a failure that goes away when space comes back, so worth retrying, never final.
func NoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// VolumeError is a failure about one volume ("" for kernel boot) or disk.
type VolumeError struct {
	Volume string
	// Image is the image reference, as planned, of the pull that failed (Apply); empty when
	// the failure is not a pull's.
	Image string
	Err   error
}

func (e *VolumeError) Error() string {
	if e.Volume == "" {
		return fmt.Sprintf("kernel boot: %v", e.Err)
	}
	return fmt.Sprintf("volume %s: %v", e.Volume, e.Err)
}

func (e *VolumeError) Unwrap() error { return e.Err }

func volErr(volume string, err error, format string, args ...any) error {
	return &VolumeError{Volume: volume, Err: fmt.Errorf(format+": %w", append(args, err)...)}
}

// Reason is a short CamelCase cause of a Plan or Apply error, for a VMI condition.
func Reason(err error) string {
	if NoSpace(err) { // whatever step hit it, a pull's included: the cause to fix is the node's
		return ReasonNoSpace
	}
	if r, ok := oci.ReasonOf(err); ok {
		return string(r)
	}
	switch {
	case errors.Is(err, oci.ErrInvalidReference):
		return string(oci.ReasonInvalidImageName)
	case errors.Is(err, ErrOutsideRoot), errors.Is(err, ErrNotSearchable):
		return ReasonPathNotAllowed
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrUnknownClaim):
		return ReasonVolumeNotFound
	case errors.Is(err, ErrInvalidVolume), errors.Is(err, ErrInvalidDisk), errors.Is(err, ErrUnknownVolume),
		errors.Is(err, ErrUnsupportedMode), errors.Is(err, ErrNotDiskFile):
		return ReasonInvalidVolume
	}
	return ReasonStorageFailed
}

// PullFailed returns the image (as planned) whose pull failed in err and whether that failure
// may go away by itself and is worth retrying later (oci.Reason.Retryable). It returns "",
// false for every other error.
func PullFailed(err error) (image string, retryable bool) {
	ve, ok := errors.AsType[*VolumeError](err)
	if !ok || ve.Image == "" {
		return "", false
	}
	r, _ := oci.ReasonOf(err)
	return ve.Image, r.Retryable()
}
