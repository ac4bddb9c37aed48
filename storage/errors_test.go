package storage

import (
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/vmlet/vmlet/storage/oci"
)

// TestReasonNoSpace: a full node (ENOSPC, EDQUOT), whatever step met it — a pull included —
// is InsufficientStorage and NoSpace; other failures are not.
func TestReasonNoSpace(t *testing.T) {
	full := &os.PathError{Op: "mkdir", Path: "/var/lib/vmlet/volumes/x", Err: syscall.ENOSPC}
	for _, err := range []error{
		volErr("scratch", full, "make empty disk"),
		&VolumeError{Volume: "cd", Image: "img", Err: &oci.ImageError{Image: "img", Reason: oci.ReasonErrImagePull, Err: full}},
		fmt.Errorf("write iso: %w", syscall.EDQUOT),
	} {
		if !NoSpace(err) || Reason(err) != ReasonNoSpace {
			t.Errorf("%v: NoSpace %v, Reason %q; want true, %s", err, NoSpace(err), Reason(err), ReasonNoSpace)
		}
	}
	other := volErr("scratch", syscall.EACCES, "make empty disk")
	if NoSpace(other) || Reason(other) == ReasonNoSpace {
		t.Errorf("%v counted as no space", other)
	}
}
