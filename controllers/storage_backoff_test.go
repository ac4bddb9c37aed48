package controllers

import (
	"testing"
	"time"

	"github.com/vmlet/vmlet/controllers/backoff"
	"github.com/vmlet/vmlet/storage"
	"github.com/vmlet/vmlet/storage/oci"
)

// TestPullBackOffMessage: the failed try carries the pull's own reason, the wait
// ImagePullBackOff; both messages say the image, the wait, when the next try is and why,
// worded as the kubelet's.
func TestPullBackOffMessage(t *testing.T) {
	cause := &storage.VolumeError{Image: "reg/img:1", Err: &oci.ImageError{Image: "reg/img:1", Reason: oci.ReasonErrImagePull, Err: oci.ErrNotFound}}
	e := backoff.Entry{Cause: cause.Error(), Delay: 20 * time.Second, Next: time.Date(2026, 12, 1, 8, 30, 20, 0, time.UTC)}
	tests := []struct {
		err          *PullBackOffError
		reason, want string
	}{
		{&PullBackOffError{Image: "reg/img:1", Entry: e, Err: cause}, "ErrImagePull",
			`Failed to pull image "reg/img:1": next try in 20s (at 08:30:20Z): kernel boot: image "reg/img:1": ErrImagePull: image not found at the source`},
		{&PullBackOffError{Image: "reg/img:1", Entry: e}, "ImagePullBackOff",
			`Back-off pulling image "reg/img:1": next try in 20s (at 08:30:20Z): kernel boot: image "reg/img:1": ErrImagePull: image not found at the source`},
	}
	for _, tt := range tests {
		if got := string(tt.err.Reason()); got != tt.reason {
			t.Errorf("Reason = %q, want %q", got, tt.reason)
		}
		if got := tt.err.Message(); got != tt.want {
			t.Errorf("Message = %q\nwant      %q", got, tt.want)
		}
	}
}
