package launcher

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/vmlet/vmlet/qemu/qga"
)

// maxAbandoned caps the guest processes the poller reaps; beyond it, they are left to qemu-ga.
const maxAbandoned = 64

// abandon records pid, a guest process that outlived its GuestExec. It keeps running (qemu-ga
// cannot kill it), and once it exits qemu-ga keeps its status and captured output (up to
// 16 MiB per stream) until a guest-exec-status reads them, which no caller will do now: the
// poller does (reap).
func (a *agentPoller) abandon(pid int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.abandoned == nil {
		a.abandoned = map[int]bool{}
	}
	if len(a.abandoned) < maxAbandoned {
		a.abandoned[pid] = true
	}
}

// reap reads the status of each abandoned process once (guest-exec-status, a short command
// like any other) and forgets those that exited, or that the agent no longer knows (an error
// reply: the agent restarted). It runs after a ping was answered; a failure ends the round.
func (a *agentPoller) reap() {
	a.mu.Lock()
	c, pids := a.conn, slices.Collect(maps.Keys(a.abandoned))
	a.mu.Unlock()
	for _, pid := range pids {
		if c == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), agentQueueTimeout+agentCommandTimeouts["guest-exec-status"])
		st, err := c.ExecStatus(ctx, pid)
		cancel()
		_, unknown := errors.AsType[*qga.Error](err)
		if err != nil && !unknown {
			return
		}
		if st.Exited || unknown {
			a.mu.Lock()
			delete(a.abandoned, pid)
			a.mu.Unlock()
			a.log.Debug("reaped abandoned guest process", "pid", pid, "exited", st.Exited, "err", err)
		}
	}
}

// forgetAbandoned drops the abandoned processes: the agent is gone (perhaps restarted, its
// records with it).
func (a *agentPoller) forgetAbandoned() {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.abandoned)
}
