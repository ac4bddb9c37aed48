package controllers

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/events"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
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

// TestWaitForImageSaysItWaits: the pass that reports a failed try (ErrImagePull, its Warning
// event) asks for another pass at once, which says the VMI waits (ImagePullBackOff): the echo
// of the status write makes no pass (echo.go), so without it the VMI said ErrImagePull until
// the next try. The waiting pass is requeued for the next try.
func TestWaitForImageSaysItWaits(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	r := &VMIReconciler{Recorder: rec}
	vmi := &vmletv1.VirtualMachineInstance{}
	cause := &storage.VolumeError{Image: "reg/img:1", Err: &oci.ImageError{Image: "reg/img:1", Reason: oci.ReasonErrImagePull, Err: oci.ErrNotFound}}
	e := backoff.Entry{Cause: cause.Error(), Delay: 20 * time.Second, Next: time.Now().Add(20 * time.Second)}

	res := r.waitForImage(vmi, &PullBackOffError{Image: "reg/img:1", Entry: e, Err: cause})
	if res.RequeueAfter > time.Second {
		t.Errorf("after a failed try the VMI is requeued in %s, want at once (to say it waits)", res.RequeueAfter)
	}
	if s := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized); s == nil || s.Reason != "ErrImagePull" {
		t.Errorf("after a failed try Synchronized is %+v, want ErrImagePull", s)
	}
	if len(rec.Events) != 1 {
		t.Errorf("a failed try made %d events, want 1", len(rec.Events))
	}

	res = r.waitForImage(vmi, &PullBackOffError{Image: "reg/img:1", Entry: e})
	if res.RequeueAfter < 10*time.Second || res.RequeueAfter > 20*time.Second {
		t.Errorf("while waiting the VMI is requeued in %s, want at the next try (≈20s)", res.RequeueAfter)
	}
	if s := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized); s == nil || s.Reason != "ImagePullBackOff" {
		t.Errorf("while waiting Synchronized is %+v, want ImagePullBackOff", s)
	}
	if vmi.Status.Phase != vmletv1.Scheduled {
		t.Errorf("a VMI waiting for its image is %q, want Scheduled", vmi.Status.Phase)
	}
	if len(rec.Events) != 1 {
		t.Errorf("waiting made an event: %d in all, want 1", len(rec.Events))
	}
}
