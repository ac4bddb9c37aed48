package controllers

import (
	"context"
	"strconv"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vmlet/vmlet/qemu"
)

// sync makes the launcher run spec: it starts the domain when there is none and otherwise
// checks that the running one is spec (the launcher refuses another). A running domain's check
// is skipped when the launcher already accepted this very spec (and netns) for this very QEMU
// process over the current connection: the launcher's answer could not differ, and asking
// costs two QMP queries of a QEMU that, under load, answers in 5–25 ms (a pass's largest cost
// after the status write). A new connection (a restarted launcher) or a new QEMU checks again.
func (r *VMIReconciler) sync(ctx context.Context, uid types.UID, l Launcher, dom DomainState, spec *qemu.Spec, netns map[string]string) error {
	key := ""
	if dom.State != DomainNone && dom.Pid != 0 {
		if h, err := jsonHash(struct {
			Spec  *qemu.Spec
			NetNS map[string]string
		}{spec, netns}); err == nil {
			key = strconv.Itoa(dom.Pid) + "/" + h
		}
	}
	if key != "" && r.syncedAs(uid) == key {
		return nil
	}
	if err := l.Sync(ctx, spec, netns); err != nil {
		return err
	}
	if key != "" {
		r.markSynced(uid, key)
	}
	return nil
}

// syncedAs is the key of the last Sync the VMI's current launcher connection accepted.
func (r *VMIReconciler) syncedAs(uid types.UID) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.conns[uid]; c != nil {
		return c.synced
	}
	return ""
}

func (r *VMIReconciler) markSynced(uid types.UID, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.conns[uid]; c != nil {
		c.synced = key
	}
}
