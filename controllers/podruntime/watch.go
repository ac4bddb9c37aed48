package podruntime

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/vmlet/vmlet/controllers/launcherpod"
)

// WatchExits calls OnExit when a launcher pod's container ends or the pod is deleted, so the
// agent reconciles the VMI at once; also when one of its attachment pods starts or stops
// holding its claim here (launcherpod.AttachmentReady) or is deleted: a hot-plugged volume
// waits for it. informers is the manager's cache (which must hold the launcher and attachment
// pods).
func (r *Runtime) WatchExits(ctx context.Context, informers cache.Informers) error {
	inf, err := informers.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("get pod informer: %w", err)
	}
	notify := func(obj any) {
		if ts, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = ts.Obj
		}
		p, ok := obj.(*corev1.Pod)
		if !ok || r.OnExit == nil {
			return
		}
		if id := p.Labels[LabelVMIUID]; id != "" {
			r.OnExit(id)
		}
		if id := p.Labels[launcherpod.LabelAttachmentFor]; id != "" {
			r.OnExit(id)
		}
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*corev1.Pod)
			n, ok2 := newObj.(*corev1.Pod)
			switch {
			case !ok1 || !ok2:
			case n.Labels[launcherpod.LabelAttachmentFor] != "":
				if launcherpod.AttachmentReady(o) != launcherpod.AttachmentReady(n) {
					notify(n)
				}
			case exitOf(o) == nil && exitOf(n) != nil:
				notify(n)
			}
		},
		DeleteFunc: notify,
	})
	if err != nil {
		return fmt.Errorf("watch launcher pods: %w", err)
	}
	return nil
}
