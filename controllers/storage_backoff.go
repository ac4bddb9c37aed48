package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/backoff"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/storage"
)

// pullKey is one VMI's pulls of one image (as planned): the kubelet's back-off key is the pod
// UID and the image.
type pullKey struct {
	uid   types.UID
	image string
}

// noSpaceKey is the back-off key (in place of an image) of a VMI whose storage could not be
// made for want of space on the node.
const noSpaceKey = ""

// PullBackOffError says a VMI's storage waits for an image, or (Image empty) for space on the
// node: its pull or preparation failed now (Err set) or earlier and the back-off before the
// next try is running (Err nil).
type PullBackOffError struct {
	// Image is the image waited for; empty: the storage waits for space (ENOSPC, EDQUOT).
	Image string
	backoff.Entry
	// Err is this reconcile's failed pull; nil when no pull was tried.
	Err error
}

func (e *PullBackOffError) Error() string {
	if e.Image == noSpaceKey {
		return fmt.Sprintf("prepare storage: back-off, %s: %s", e.wait(), e.Cause)
	}
	return fmt.Sprintf("pull image %q: back-off, %s: %s", e.Image, e.wait(), e.Cause)
}

// Message is the condition and event text, worded as the kubelet's: "Failed to pull image …"
// for the try that failed, "Back-off pulling image …" while waiting. It changes only with a
// new try, so a VMI waiting is not rewritten on every reconcile.
func (e *PullBackOffError) Message() string {
	if e.Image == noSpaceKey {
		if e.Err != nil {
			return fmt.Sprintf("Failed to prepare storage, the node is out of space: %s: %s", e.wait(), e.Cause)
		}
		return fmt.Sprintf("Back-off preparing storage, the node is out of space: %s: %s", e.wait(), e.Cause)
	}
	if e.Err != nil {
		return fmt.Sprintf("Failed to pull image %q: %s: %s", e.Image, e.wait(), e.Cause)
	}
	return fmt.Sprintf("Back-off pulling image %q: %s: %s", e.Image, e.wait(), e.Cause)
}

func (e *PullBackOffError) wait() string { return e.NextTry() }

func (e *PullBackOffError) Unwrap() error { return e.Err }

// Reason is the failed pull's reason (ErrImagePull, ...) or ImagePullBackOff while waiting.
func (e *PullBackOffError) Reason() vmistatus.Reason {
	if e.Image == noSpaceKey { // the cause to fix, while failing and while waiting alike
		return vmistatus.Reason(storage.ReasonNoSpace)
	}
	if e.Err != nil {
		return vmistatus.Reason(storage.Reason(e.Err))
	}
	return vmistatus.ReasonImagePullBackOff
}

// pullBackOff is the node's back-off of failed image pulls, made on first use.
func (r *VMIReconciler) pullBackOff() *backoff.Backoff[pullKey] { return lazyBackoff(r, &r.pulls) }

// lazyBackoff returns *b, made on its first use with the storage's back-off (the kubelet's
// image pull one by default), as lazyTracker makes trackers.
func lazyBackoff[K comparable](r *VMIReconciler, b **backoff.Backoff[K]) *backoff.Backoff[K] {
	r.mu.Lock()
	defer r.mu.Unlock()
	if *b == nil {
		*b = backoff.New[K](r.Storage.PullBackOff, r.Storage.PullBackOffMax, nil)
	}
	return *b
}

// applyStorage returns the spec to start with once the files of the boot-time volumes and the
// kernel are made, and errStoragePreparing while that runs: storage is prepared by a tracked
// operation (storage_ops.go), never inside the reconcile, and its end wakes the VMI. It runs
// once per storage plan (again when the plan changes, e.g. a Secret's cloud-init data, and
// after a failure). A pull that fails in a way that may go away (registry down, image not
// there yet) starts or extends the VMI's back-off for that image, and while it runs no pull of
// it is tried, however often the VMI is reconciled: both come back as a *PullBackOffError.
func (r *VMIReconciler) applyStorage(vmi *vmletv1.VirtualMachineInstance, want *translate.Desired) (*qemu.Spec, *storage.Result, error) {
	b := r.pullBackOff()
	if e, waiting := b.Waiting(pullKey{vmi.UID, noSpaceKey}); waiting {
		return nil, nil, &PullBackOffError{Entry: e}
	}
	for _, image := range want.Storage.Pulls() {
		if e, waiting := b.Waiting(pullKey{vmi.UID, image}); waiting {
			return nil, nil, &PullBackOffError{Image: image, Entry: e}
		}
	}
	res, err := r.prepareStorage(vmi.UID, want.Storage)
	if errors.Is(err, errStoragePreparing) {
		return nil, nil, err
	}
	if err != nil {
		// An operation cut short (the agent stopping, the plan replaced) is no failure of
		// the image.
		if image, retry := storage.PullFailed(err); retry && !errors.Is(err, context.Canceled) {
			e := b.Failed(pullKey{vmi.UID, image}, err.Error())
			return nil, nil, &PullBackOffError{Image: image, Entry: e, Err: err}
		}
		// A full node (volumes or image cache) frees up: retried with back-off, never final.
		if storage.NoSpace(err) {
			e := b.Failed(pullKey{vmi.UID, noSpaceKey}, err.Error())
			return nil, nil, &PullBackOffError{Entry: e, Err: err}
		}
		return nil, nil, err
	}
	if n := r.forgetPulls(vmi.UID); n > 0 {
		r.Recorder.Eventf(vmi, nil, "Normal", string(vmistatus.ReasonPulled), "PullImage", "images pulled after back-off")
	}
	return want.Resolve(res), res, nil
}

// forgetPulls drops the VMI's back-off entries (its images pulled, or the VMI is gone) and
// returns how many there were.
func (r *VMIReconciler) forgetPulls(uid types.UID) int {
	return r.pullBackOff().DeleteFunc(func(k pullKey) bool { return k.uid == uid })
}

// storageDegraded observes a running domain whose storage no longer applies
// (lifecycle.ReportStorage); the domain keeps the disks it opened. The failure is reported (a
// Warning event when the reason changes) and retried with the controller's back-off.
func (r *VMIReconciler) storageDegraded(vmi *vmletv1.VirtualMachineInstance, dom DomainState, err error) (ctrl.Result, error) {
	prev := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
	reason := vmistatus.Reason(storage.Reason(err))
	if prev == nil || prev.Reason != string(reason) {
		r.Recorder.Eventf(vmi, nil, "Warning", string(reason), "ApplyStorage", "%v", err)
	}
	r.observeDomain(vmi, dom)
	vmistatus.NotSynchronized(vmi, reason, err.Error())
	return ctrl.Result{}, err
}

// waitForImage reports a pull in back-off, as the kubelet reports a container's: a VMI not
// started yet is Scheduled; Synchronized=False with the failed try's reason (ErrImagePull for
// most) and one Warning event per try, then ImagePullBackOff while waiting, the next try's
// time and the cause in the message. The VMI is requeued at once after a failed try (to say
// it waits) and then for the next try.
func (r *VMIReconciler) waitForImage(vmi *vmletv1.VirtualMachineInstance, pb *PullBackOffError) ctrl.Result {
	if vmi.Status.Phase == "" || vmi.Status.Phase == vmletv1.Pending {
		vmistatus.SetPhase(vmi, vmletv1.Scheduled)
	}
	reason := pb.Reason()
	if pb.Err != nil {
		action := "PullImage"
		if pb.Image == noSpaceKey {
			action = "ApplyStorage"
		}
		r.Recorder.Eventf(vmi, nil, "Warning", string(reason), action, "%s", pb.Message())
	}
	vmistatus.NotSynchronized(vmi, reason, pb.Message())
	if vmi.Status.Phase == vmletv1.Scheduled { // not running yet: say why it is not Ready either
		vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, reason, pb.Message())
	}
	if pb.Err != nil {
		// The failed try is written; the next pass (the echo of this write makes none) says
		// the VMI waits (ImagePullBackOff), as the kubelet follows ErrImagePull with it.
		return ctrl.Result{RequeueAfter: time.Millisecond}
	}
	return ctrl.Result{RequeueAfter: max(time.Until(pb.Next), time.Millisecond)}
}
