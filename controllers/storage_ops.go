package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/ops"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/storage"
)

// errStoragePreparing says a VMI's storage operation runs; its end wakes the VMI.
var errStoragePreparing = errors.New("storage is being prepared")

// hotKey is one hotpluggable volume of a VMI.
type hotKey struct {
	uid    types.UID
	volume string
}

// storageTracker is the node's storage operations of VMIs' boot-time volumes, made on first
// use.
func (r *VMIReconciler) storageTracker() *ops.Tracker[types.UID, *storage.Result] {
	return lazyTracker(r, &r.storageOps, 0, r.wakeUID)
}

// hotplugTracker is the node's storage operations of hotpluggable volumes, made on first use.
func (r *VMIReconciler) hotplugTracker() *ops.Tracker[hotKey, *storage.Result] {
	return lazyTracker(r, &r.hotplugOps, 0, func(k hotKey) { r.wakeUID(k.uid) })
}

// lazyTracker returns *t, made with ops.New(timeout, wake) on its first use (the reconciler
// is built as a struct literal in many places; its trackers come into being when needed).
func lazyTracker[K comparable, V any](r *VMIReconciler, t **ops.Tracker[K, V], timeout time.Duration, wake func(K)) *ops.Tracker[K, V] {
	r.mu.Lock()
	defer r.mu.Unlock()
	if *t == nil {
		*t = ops.New[K, V](timeout, wake)
	}
	return *t
}

// wakeUID wakes the VMI uid (a tracker's wake).
func (r *VMIReconciler) wakeUID(uid types.UID) { r.WakeByID(string(uid)) }

// prepareHotplugVolume is prepareStorage for one hotpluggable volume of the VMI uid.
func (r *VMIReconciler) prepareHotplugVolume(uid types.UID, hv translate.HotplugVolume) (*storage.Result, error) {
	id, err := planID(hv.Plan)
	if err != nil {
		return nil, err
	}
	t := r.hotplugTracker()
	k := hotKey{uid, hv.Name}
	out := t.Ensure(k, id, func(ctx context.Context) (*storage.Result, error) { return r.apply(ctx, hv.Plan) })
	switch {
	case out.State == ops.Running:
		return nil, errStoragePreparing
	case out.Err != nil:
		t.Forget(k)
		return nil, out.Err
	}
	return out.Value, nil
}

// prepareStorage returns the outcome of applying plan for the VMI uid: the result once the
// operation succeeded, its error once it failed (forgotten, so that the next reconcile tries
// again) and errStoragePreparing while it runs. A plan that differs from the one in flight
// replaces it.
func (r *VMIReconciler) prepareStorage(uid types.UID, plan *storage.VMPlan) (*storage.Result, error) {
	id, err := planID(plan)
	if err != nil {
		return nil, err
	}
	t := r.storageTracker()
	out := t.Ensure(uid, id, func(ctx context.Context) (*storage.Result, error) {
		t0 := time.Now()
		defer r.trace(uid, TraceStorage, t0)
		return r.apply(ctx, plan)
	})
	switch {
	case out.State == ops.Running:
		return nil, errStoragePreparing
	case out.Err != nil:
		t.Forget(uid)
		return nil, out.Err
	}
	return out.Value, nil
}

// forgetStorage cancels the VMI's storage operations, waits for them to return and forgets
// their outcomes: its files can be removed next.
func (r *VMIReconciler) forgetStorage(uid types.UID) {
	r.storageTracker().Forget(uid)
	r.hotplugTracker().ForgetFunc(func(k hotKey) bool { return k.uid == uid })
	r.hotBackoff().DeleteFunc(func(k hotKey) bool { return k.uid == uid })
}

// stopOps stops every operation (the agent is stopping).
func (r *VMIReconciler) stopOps() {
	r.storageTracker().Stop()
	r.hotplugTracker().Stop()
	r.placeTracker().Stop()
	r.netTracker().Stop()
	r.pauseTracker().Stop()
	r.stopMigrations()
}

// planID identifies a storage plan: the same plan prepared twice gives the same files.
func planID(p *storage.VMPlan) (string, error) {
	id, err := jsonHash(p)
	if err != nil {
		return "", fmt.Errorf("hash storage plan: %w", err)
	}
	return id, nil
}

// jsonHash identifies v by the SHA-256 of its JSON (maps in key order): equal values, equal
// hashes. An operation's identity, or what a launcher accepted (sync.go).
func jsonHash(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// storagePreparing reports a VMI whose domain waits for its storage (images pulled, overlays,
// empty disks and the cloud-init ISO made). A retry after a failed pull leaves the conditions
// saying why it waits (ErrImagePull, ImagePullBackOff), as the kubelet keeps a container
// Waiting with its pull reason while it tries again.
func (r *VMIReconciler) storagePreparing(vmi *vmletv1.VirtualMachineInstance, want *translate.Desired) {
	if vmi.Status.Phase == "" || vmi.Status.Phase == vmletv1.Pending {
		vmistatus.SetPhase(vmi, vmletv1.Scheduled)
	}
	b := r.pullBackOff()
	for _, image := range want.Storage.Pulls() {
		if b.Failing(pullKey{vmi.UID, image}) {
			return
		}
	}
	vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, vmistatus.ReasonPreparingStorage, "pulling images and making the disks")
}
