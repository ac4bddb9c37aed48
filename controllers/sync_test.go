package controllers

import (
	"context"
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vmlet/vmlet/qemu"
)

// countingLauncher counts Sync calls and answers with err.
type countingLauncher struct {
	Launcher
	syncs int
	err   error
}

func (c *countingLauncher) Sync(context.Context, *qemu.Spec, map[string]string) error {
	c.syncs++
	return c.err
}

// TestSyncSkipsAccepted: a running domain's Sync is asked once per spec, netns and QEMU
// process over one connection; a refused one, a starting domain, another spec, another QEMU
// or a new connection ask again.
func TestSyncSkipsAccepted(t *testing.T) {
	const uid = types.UID("u1")
	r := &VMIReconciler{conns: map[types.UID]*launcherConn{uid: {}}}
	l := &countingLauncher{}
	running := DomainState{State: DomainRunning, Pid: 10}
	spec := &qemu.Spec{Name: "a"}
	netns := map[string]string{"nic0": "/run/netns/x"}
	step := func(what string, dom DomainState, s *qemu.Spec, n map[string]string, wantCalls int) {
		t.Helper()
		before := l.syncs
		err := r.sync(context.Background(), uid, l, dom, s, n)
		if !errors.Is(err, l.err) {
			t.Fatalf("%s: %v, want %v", what, err, l.err)
		}
		if got := l.syncs - before; got != wantCalls {
			t.Errorf("%s: %d Sync calls, want %d", what, got, wantCalls)
		}
	}
	step("starting", DomainState{State: DomainNone}, spec, netns, 1)
	step("starting again", DomainState{State: DomainNone}, spec, netns, 1)
	step("first pass of the running domain", running, spec, netns, 1)
	step("the same again", running, &qemu.Spec{Name: "a"}, map[string]string{"nic0": "/run/netns/x"}, 0)
	step("another spec", running, &qemu.Spec{Name: "b"}, netns, 1)
	step("another netns", running, &qemu.Spec{Name: "b"}, map[string]string{"nic0": "/run/netns/y"}, 1)
	step("another QEMU", DomainState{State: DomainRunning, Pid: 11}, &qemu.Spec{Name: "b"}, map[string]string{"nic0": "/run/netns/y"}, 1)
	step("pid unknown", DomainState{State: DomainRunning}, spec, netns, 1)
	step("pid unknown again", DomainState{State: DomainRunning}, spec, netns, 1)
	l.err = errors.New("refused")
	step("refused", running, spec, netns, 1)
	step("refused is not remembered", running, spec, netns, 1)
	l.err = nil
	step("accepted", running, spec, netns, 1)
	r.conns[uid] = &launcherConn{} // reconnected
	step("new connection", running, spec, netns, 1)
	delete(r.conns, uid)
	step("no connection", running, spec, netns, 1)
	step("no connection again", running, spec, netns, 1)
}
