package qemu

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vmlet/vmlet/qemu/qmp"
)

// CPUStatus is the vCPU topology as QEMU reports it (query-hotpluggable-cpus).
type CPUStatus struct {
	// Sockets present now: boot and plugged ones, those whose unplug is pending included.
	Sockets    int
	Cores      int
	Threads    int
	MaxSockets int
	// UnplugPending counts the sockets asked to go that the guest has not released yet.
	UnplugPending int
}

// hotpluggableCPU is one entry of query-hotpluggable-cpus; QOMPath is empty for a free slot.
type hotpluggableCPU struct {
	Type  string `json:"type"`
	Props struct {
		Socket int `json:"socket-id"`
		Core   int `json:"core-id"`
		Thread int `json:"thread-id"`
	} `json:"props"`
	QOMPath string `json:"qom-path"`
}

func (h hotpluggableCPU) slot() cpuSlot {
	return cpuSlot{Socket: h.Props.Socket, Core: h.Props.Core, Thread: h.Props.Thread}
}

// peripheralPrefix is the QOM folder of devices that have an id.
const peripheralPrefix = "/machine/peripheral/"

// CPUUnplugged reports whether e is the DEVICE_DELETED of a vCPU vmlet plugged, and its id.
// QEMU 7.2 reports a vCPU's deletion only for its APIC child
// ({"path": "/machine/peripheral/cpu_s1_c0_t0/lapic"}, no "device"); later versions may also
// report the vCPU itself. Both count. Pure.
func CPUUnplugged(e qmp.Event) (id string, ok bool) {
	if e.Name != "DEVICE_DELETED" {
		return "", false
	}
	var d struct {
		Path string `json:"path"`
	}
	if json.Unmarshal(e.Data, &d) != nil {
		return "", false
	}
	rest, found := strings.CutPrefix(d.Path, peripheralPrefix+"cpu_s")
	if !found {
		return "", false
	}
	rest = strings.TrimSuffix(rest, "/lapic")
	if strings.Contains(rest, "/") {
		return "", false
	}
	return "cpu_s" + rest, true
}

// hotpluggableCPUs runs query-hotpluggable-cpus.
func (vm *VM) hotpluggableCPUs(ctx context.Context) ([]hotpluggableCPU, error) {
	var out []hotpluggableCPU
	if err := vm.execute(ctx, "query-hotpluggable-cpus", nil, &out); err != nil {
		return nil, fmt.Errorf("query cpus: %w", err)
	}
	return out, nil
}

// CPUs returns the vCPU topology; ErrNotHotpluggable without CPU hotplug.
//
// QMP: query-hotpluggable-cpus.
func (vm *VM) CPUs(ctx context.Context) (CPUStatus, error) {
	if !vm.spec.CPU.cpuHotplug() {
		return CPUStatus{}, fmt.Errorf("cpus: %w: started without cpu hotplug", ErrNotHotpluggable)
	}
	slots, err := vm.hotpluggableCPUs(ctx)
	if err != nil {
		return CPUStatus{}, err
	}
	return vm.cpuStatus(slots), nil
}

// cpuStatus summarizes slots and forgets pending unplugs that completed unheard.
func (vm *VM) cpuStatus(slots []hotpluggableCPU) CPUStatus {
	c := vm.spec.CPU
	st := CPUStatus{Cores: max(c.Cores, 1), Threads: max(c.Threads, 1), MaxSockets: c.MaxSockets}
	present, pending := map[int]bool{}, map[int]bool{}
	vm.mu.Lock()
	defer vm.mu.Unlock()
	alive := map[string]bool{}
	for _, s := range slots {
		if s.QOMPath == "" {
			continue
		}
		present[s.Props.Socket] = true
		id := strings.TrimPrefix(s.QOMPath, peripheralPrefix)
		alive[id] = true
		if vm.cpuUnplugging[id] {
			pending[s.Props.Socket] = true
		}
	}
	for id := range vm.cpuUnplugging {
		if !alive[id] {
			delete(vm.cpuUnplugging, id)
			delete(vm.cpuDevs, id)
			vm.cpuUnplugged = true
		}
	}
	st.Sockets, st.UnplugPending = len(present), len(pending)
	return st
}

// SetCPUs plugs or unplugs whole sockets until sockets are present: free slots of the sockets
// below it are filled in ascending order (device_add with the QOM type QEMU names, socket-id,
// core-id, thread-id and the id cpuDeviceID gives), the vCPUs of the sockets from it up are
// asked to go in descending order (device_del). Plugs are done when it returns; unplugs need
// the guest to eject the vCPU (ACPI): SetCPUs waits for their DEVICE_DELETED up to unplugWait
// and reports the rest as CPUStatus.UnplugPending (no error: the requests stay pending in QEMU
// and complete whenever the guest lets go). Socket 0 stays. ctx bounds the QMP commands.
//
// Under TCG (see tcg_vcpus.go) unplugs are refused with ErrUnsafe where QEMU crashes after
// one (TCGUnplugCrashes: before QEMU 10), and a plug is refused with ErrUnsafe once a vCPU was
// unplugged in this QEMU's life (it could no longer migrate, and past maxcpus vCPUs made it
// aborts); nothing is sent then.
//
// QMP: query-hotpluggable-cpus, device_add/device_del, event DEVICE_DELETED.
func (vm *VM) SetCPUs(ctx context.Context, sockets int, unplugWait time.Duration) (CPUStatus, error) {
	c := vm.spec.CPU
	if !c.cpuHotplug() {
		return CPUStatus{}, fmt.Errorf("set cpus: %w: started without cpu hotplug (max sockets 0)", ErrNotHotpluggable)
	}
	if sockets < 1 || sockets > c.MaxSockets {
		return CPUStatus{}, specErr("sockets", fmt.Sprint(sockets), fmt.Sprintf("must be 1-%d", c.MaxSockets))
	}
	vm.devMu.Lock()
	defer vm.devMu.Unlock()
	slots, err := vm.hotpluggableCPUs(ctx)
	if err != nil {
		return CPUStatus{}, err
	}
	if TCGUnplugCrashes(string(vm.resolved.Accel), vm.version) && slices.ContainsFunc(slots, func(s hotpluggableCPU) bool {
		return s.Props.Socket >= sockets && s.QOMPath != ""
	}) {
		return CPUStatus{}, fmt.Errorf("set cpus %d: %w: vcpu hot-unplug under tcg crashes qemu %s shortly after the guest ejects (fixed in qemu 10)", sockets, ErrUnsafe, vm.version)
	}
	plugs := slices.ContainsFunc(slots, func(s hotpluggableCPU) bool { return s.Props.Socket < sockets && s.QOMPath == "" })
	if plugs && tcgPlugAfterUnplugRefused(vm.resolved.Accel, vm.cpuWasUnplugged()) {
		return CPUStatus{}, fmt.Errorf("set cpus %d: %w: under tcg a vcpu plugged after a vcpu unplug leaves qemu unable to migrate and can abort it: restart the VM, then plug", sockets, ErrUnsafe)
	}
	deleted, unsub := vm.mon.Subscribe(func(e qmp.Event) bool { _, ok := CPUUnplugged(e); return ok })
	defer unsub()
	slices.SortFunc(slots, func(a, b hotpluggableCPU) int {
		return cmp.Or(cmp.Compare(a.Props.Socket, b.Props.Socket), cmp.Compare(a.Props.Core, b.Props.Core),
			cmp.Compare(a.Props.Thread, b.Props.Thread))
	})
	for _, s := range slots {
		if s.Props.Socket >= sockets || s.QOMPath != "" {
			continue
		}
		sl := s.slot()
		id := cpuDeviceID(sl.Socket, sl.Core, sl.Thread)
		args := map[string]any{"driver": s.Type, "id": id, "socket-id": sl.Socket, "core-id": sl.Core, "thread-id": sl.Thread}
		if err := vm.execute(ctx, "device_add", args, nil); err != nil {
			return CPUStatus{}, fmt.Errorf("plug cpu %s: %w", id, err)
		}
		vm.recordCPU(id, sl.Socket)
	}
	waiting := map[string]bool{}
	for _, s := range slices.Backward(slots) {
		if s.Props.Socket < sockets || s.QOMPath == "" {
			continue
		}
		sl := s.slot()
		id := cpuDeviceID(sl.Socket, sl.Core, sl.Thread)
		if s.QOMPath != peripheralPrefix+id {
			continue // a CPU of -smp (socket 0): QEMU cannot unplug it
		}
		if !vm.cpuPending(id) {
			if err := vm.execute(ctx, "device_del", map[string]any{"id": id}, nil); err != nil {
				return CPUStatus{}, fmt.Errorf("unplug cpu %s: %w", id, err)
			}
			vm.markCPUUnplugging(id)
		}
		waiting[id] = true
	}
	vm.awaitCPUUnplugs(ctx, deleted, waiting, unplugWait)
	if ctx.Err() != nil { // still answer with the state, within a short bound of its own
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
	}
	if slots, err = vm.hotpluggableCPUs(ctx); err != nil {
		return CPUStatus{}, err
	}
	return vm.cpuStatus(slots), nil
}

// awaitCPUUnplugs waits until every id in waiting was deleted, wait passed or ctx ended.
func (vm *VM) awaitCPUUnplugs(ctx context.Context, deleted <-chan qmp.Event, waiting map[string]bool, wait time.Duration) {
	if len(waiting) == 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for len(waiting) > 0 {
		select {
		case e, ok := <-deleted:
			if !ok {
				return
			}
			id, _ := CPUUnplugged(e)
			delete(waiting, id)
			vm.forgetCPU(id)
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// watchCPUUnplugs forgets vCPUs whose unplug completed after SetCPUs stopped waiting, so that
// MigrationSpec stays right; it ends with the monitor.
func (vm *VM) watchCPUUnplugs(events <-chan qmp.Event) {
	for e := range events {
		if id, ok := CPUUnplugged(e); ok {
			vm.forgetCPU(id)
		}
	}
}

// MigrationSafe says whether an outgoing migration may start: not under TCG once a vCPU was
// unplugged in this QEMU's life, where QEMU 10 can stay in the migration's "setup" for good
// (qemu/tcg_vcpus.go): ErrUnsafe, saying to restart the VM.
func (vm *VM) MigrationSafe() error {
	if tcgMigrateAfterUnplugRefused(vm.resolved.Accel, vm.cpuWasUnplugged()) {
		return fmt.Errorf("%w: a vCPU was unplugged from this QEMU under TCG, where a migration can stay in setup for good (QEMU 10): restart the VM to move it", ErrUnsafe)
	}
	return nil
}

// cpuWasUnplugged reports whether a vCPU was unplugged since QEMU started.
func (vm *VM) cpuWasUnplugged() bool {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.cpuUnplugged
}

func (vm *VM) recordCPU(id string, socket int) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.cpuDevs == nil {
		vm.cpuDevs = map[string]int{}
	}
	vm.cpuDevs[id] = socket
}

func (vm *VM) forgetCPU(id string) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if _, ok := vm.cpuDevs[id]; ok {
		vm.cpuUnplugged = true
	}
	delete(vm.cpuDevs, id)
	delete(vm.cpuUnplugging, id)
}

func (vm *VM) cpuPending(id string) bool {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.cpuUnplugging[id]
}

func (vm *VM) markCPUUnplugging(id string) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.cpuUnplugging == nil {
		vm.cpuUnplugging = map[string]bool{}
	}
	vm.cpuUnplugging[id] = true
}

// presentSockets is the number of sockets the records say exist (socket 0 and one past the
// highest plugged one: sockets go from the top, so they are contiguous unless an unplug in
// the middle of a range completed while a higher one is still pending).
func (vm *VM) presentSockets() int {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	n := 1
	for _, s := range vm.cpuDevs {
		n = max(n, s+1)
	}
	return n
}

// recordStartResources records the vCPUs the command line created with ids and the virtio-mem
// requested size at start.
func (vm *VM) recordStartResources() {
	c := vm.spec.CPU
	if c.cpuHotplug() {
		for s := 1; s < c.presentSockets(); s++ {
			for _, sl := range c.socketSlots(s) {
				vm.recordCPU(cpuDeviceID(sl.Socket, sl.Core, sl.Thread), s)
			}
		}
	}
	if m := vm.spec.MemoryHotplug; m != nil {
		vm.mu.Lock()
		vm.memRequestedMiB = m.RequestedMiB
		vm.mu.Unlock()
	}
}

// liveResources sets the CPU sockets and virtio-mem requested size of s (a MigrationSpec) to
// the current ones.
func (vm *VM) liveResources(s *Spec) {
	if s.CPU.cpuHotplug() {
		present := vm.presentSockets()
		s.CPU.Sockets = min(max(vm.spec.CPU.Sockets, 1), present)
		s.CPU.PluggedSockets = present - s.CPU.Sockets
	}
	if s.MemoryHotplug != nil {
		vm.mu.Lock()
		s.MemoryHotplug.RequestedMiB = vm.memRequestedMiB
		vm.mu.Unlock()
	}
}
