package controllers

import (
	"errors"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vmlet/vmlet/qemu/launcher"
)

// maxStartAttempts is how many times the agent starts a domain that QEMU refuses (it exits
// during start, or a QMP command of the start fails) before the VMI fails. Such refusals come
// from the spec meeting this node's QEMU — a machine type or CPU model it does not have, one
// image opened twice — and retrying does not change them; a few attempts cover a transient one.
const maxStartAttempts = 3

// startRefused counts a failed start of the VMI's domain and reports whether it was the last
// attempt: true only for QEMU's refusals (launcher.ErrQEMUExited, launcher.ErrQMP).
func (r *VMIReconciler) startRefused(uid types.UID, err error) bool {
	if !errors.Is(err, launcher.ErrQEMUExited) && !errors.Is(err, launcher.ErrQMP) {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refused == nil {
		r.refused = map[types.UID]int{}
	}
	r.refused[uid]++
	return r.refused[uid] >= maxStartAttempts
}

// forgetStarts drops the VMI's count of refused starts (it started, or it is gone).
func (r *VMIReconciler) forgetStarts(uid types.UID) {
	r.mu.Lock()
	delete(r.refused, uid)
	r.mu.Unlock()
}
