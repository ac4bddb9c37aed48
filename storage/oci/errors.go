package oci

import (
	"errors"
	"fmt"
)

// Reason is a short CamelCase cause for a VMI condition or event. The pull reasons match the
// kubelet's for container images.
type Reason string

// Reasons carried by ImageError.
const (
	ReasonInvalidImageName     Reason = "InvalidImageName"
	ReasonErrImagePull         Reason = "ErrImagePull"
	ReasonErrImageNeverPull    Reason = "ErrImageNeverPull"
	ReasonDigestMismatch       Reason = "ImageDigestMismatch"
	ReasonInvalidImage         Reason = "InvalidImage"
	ReasonInvalidContainerDisk Reason = "InvalidContainerDisk"
	ReasonInvalidKernelBoot    Reason = "InvalidKernelBootImage"
)

// Retryable reports whether a failure with this reason may go away by itself, so that the pull
// is worth trying again later: like the kubelet, which retries every failed pull with back-off
// (unreachable or erroring registry, unknown repository or tag, refused credentials, bad
// content) and gives up only on a reference that does not parse (InvalidImageName). An image
// that is not in the cache under pull policy Never may still be put there. What is wrong inside
// an image that was pulled (no disk, no kernel) is final: the same digest never changes.
func (r Reason) Retryable() bool {
	switch r {
	case ReasonErrImagePull, ReasonErrImageNeverPull, ReasonDigestMismatch, ReasonInvalidImage:
		return true
	}
	return false
}

// Sentinels wrapped by ImageError.
var (
	ErrInvalidReference  = errors.New("invalid image reference")
	ErrNotPresent        = errors.New("image not present in the cache and pull policy is Never")
	ErrNotFound          = errors.New("image not found at the source")
	ErrUnauthorized      = errors.New("registry refused access")
	ErrDigestMismatch    = errors.New("content does not match its digest")
	ErrInvalidImage      = errors.New("invalid image")
	ErrTooLarge          = errors.New("image too large")
	ErrNoDisk            = errors.New("no disk file in image")
	ErrMultipleDisks     = errors.New("more than one disk file in image")
	ErrEmptyDisk         = errors.New("disk file is empty")
	ErrUnsupportedFormat = errors.New("unsupported disk image format")
	ErrBackingFile       = errors.New("disk image references another file")
	ErrKernelMissing     = errors.New("kernel missing from image")
	ErrInitrdMissing     = errors.New("initrd missing from image")
)

// ImageError is any failure to pull or use an image.
type ImageError struct {
	Image  string // the reference as given
	Reason Reason
	Err    error
}

func (e *ImageError) Error() string {
	return fmt.Sprintf("image %q: %s: %v", e.Image, e.Reason, e.Err)
}

func (e *ImageError) Unwrap() error { return e.Err }

// DigestError is a blob or manifest whose content hashes to something else than the digest it
// was fetched by (What is "manifest", "config", "layer" or "diff_id").
type DigestError struct {
	What string
	Want string
	Got  string
}

func (e *DigestError) Error() string {
	return fmt.Sprintf("%s: want %s, got %s", e.What, e.Want, e.Got)
}

// Is makes errors.Is(err, ErrDigestMismatch) true.
func (e *DigestError) Is(target error) bool { return target == ErrDigestMismatch }

// ReasonOf returns the Reason of the first ImageError in err's chain.
func ReasonOf(err error) (Reason, bool) {
	if ie, ok := errors.AsType[*ImageError](err); ok {
		return ie.Reason, true
	}
	return "", false
}

func imageErr(image string, reason Reason, format string, args ...any) error {
	return &ImageError{Image: image, Reason: reason, Err: fmt.Errorf(format, args...)}
}
