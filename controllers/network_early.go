package controllers

import (
	"context"
	"log/slog"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/ops"
	"github.com/vmlet/vmlet/controllers/translate"
)

// attachEarly starts wiring the VMI's pod network (the attach of ensureNetwork: netns, veth,
// bridge, nftables, taps; ≈28 ms here, the longest step of a start after QEMU's own) as a
// tracked operation, so that it runs while the launcher is exec'd and starts up rather than
// after. The pass that finds the launcher ready calls ensureNetwork as always: attach is
// idempotent and serialized, so it returns the attachment this made (waiting for it if it
// still runs) or, had this failed, tries again and reports the failure. Nothing is woken when
// it ends: the launcher's readiness wakes the VMI. teardown forgets it before the network is
// released, so an attach never outlives its VMI's cleanup.
func (r *VMIReconciler) attachEarly(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, want *translate.Desired) {
	if want.Network == nil || r.Network == nil || r.Network.Pods == nil {
		return
	}
	ns, name, uid := vmi.Namespace, vmi.Name, vmi.UID
	logger := slog.New(logr.ToSlogHandler(log.FromContext(ctx).WithValues("vmi", ns+"/"+name)))
	boot := want.BootNetwork()
	r.netTracker().Ensure(uid, "attach", func(context.Context) (struct{}, error) {
		_, err := r.Network.attach(uid, boot, func() { r.Wake(ns, name) }, logger)
		return struct{}{}, err
	})
}

// netTracker is the node's early network attaches, made on first use.
func (r *VMIReconciler) netTracker() *ops.Tracker[types.UID, struct{}] {
	return lazyTracker(r, &r.netOps, 0, nil)
}
