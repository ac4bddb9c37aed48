package controllers

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu"
)

// memoryLauncher is a ResourceHotplugger whose guest holds plugged memory: it counts the
// asks and answers with the state it was given.
type memoryLauncher struct {
	asked []int
	mem   MemoryState
}

func (m *memoryLauncher) SetCPUs(context.Context, int) (DomainState, error) {
	return DomainState{}, nil
}

func (m *memoryLauncher) SetMemory(_ context.Context, mib int) (DomainState, error) {
	m.asked = append(m.asked, mib)
	m.mem.RequestedBytes = int64(mib) << 20
	mem := m.mem
	return DomainState{State: DomainRunning, Memory: &mem}, nil
}

// TestMemoryUnplugAskedAgain: memory the guest does not give back is asked again every
// memoryReask over the launcher connection (QEMU then tells the guest again, whose driver
// would otherwise wait out its own back-off of up to 5 minutes), not on every pass; the
// first ask counts; the condition stays pending meanwhile; once the guest gave it back
// nothing more is asked.
func TestMemoryUnplugAskedAgain(t *testing.T) {
	const uid = types.UID("u1")
	conn := &launcherConn{}
	r := &VMIReconciler{conns: map[types.UID]*launcherConn{uid: conn}, Recorder: events.NewFakeRecorder(100)}
	guest := resource.MustParse("256Mi")
	vmi := &vmletv1.VirtualMachineInstance{}
	vmi.UID = uid
	vmi.Spec.Domain.Memory = &vmletv1.Memory{Guest: &guest}
	vmi.Status.Memory = &vmletv1.MemoryStatus{}
	spec := &qemu.Spec{MemoryMiB: 256, MemoryHotplug: &qemu.MemoryHotplug{MaxMiB: 768}}
	l := &memoryLauncher{mem: MemoryState{BootBytes: 256 << 20, RequestedBytes: 256 << 20, PluggedBytes: 256 << 20}}
	pass := func(what string, wantAsks int) {
		t.Helper()
		mem := l.mem
		if _, err := r.reconcileMemory(context.Background(), vmi, l, DomainState{State: DomainRunning, Memory: &mem}, spec, true); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(l.asked) != wantAsks {
			t.Errorf("%s: %d asks %v, want %d", what, len(l.asked), l.asked, wantAsks)
		}
	}
	pass("unplug asked", 1)
	l.mem.PluggedBytes = 128 << 20 // the guest gave half back, then got stuck
	pass("pending, just asked", 1)
	pass("pending again", 1)
	conn.memAsked = time.Now().Add(-memoryReask)
	pass("pending after memoryReask", 2)
	if l.asked[1] != 0 {
		t.Errorf("asked again for %d MiB, want 0", l.asked[1])
	}
	pass("pending, just asked again", 2)
	if c := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceMemoryChange); c == nil || c.Status != "True" || c.Reason != "MemoryPlugPending" {
		t.Errorf("condition while the guest holds the memory: %+v, want True MemoryPlugPending", c)
	}
	l.mem.PluggedBytes = 0
	conn.memAsked = time.Now().Add(-memoryReask)
	pass("given back", 2)
	if c := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceMemoryChange); c != nil {
		t.Errorf("condition after the guest gave the memory back: %+v, want none", c)
	}
}
