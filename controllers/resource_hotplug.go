package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/qemu"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// ResourceHotplugger changes a running domain's vCPUs and memory: the launcher's SetCPUs and
// SetMemory RPCs. A Launcher without it cannot hotplug CPUs or memory.
type ResourceHotplugger interface {
	// SetCPUs plugs or unplugs whole sockets until sockets are present; an unplug the guest
	// has not finished is in the returned state's CPU.UnplugPending.
	SetCPUs(ctx context.Context, sockets int) (DomainState, error)
	// SetMemory sets the virtio-mem requested size; the guest plugs or unplugs afterwards.
	SetMemory(ctx context.Context, requestedMiB int) (DomainState, error)
}

var _ ResourceHotplugger = (*grpcLauncher)(nil)

func (g *grpcLauncher) SetCPUs(ctx context.Context, sockets int) (DomainState, error) {
	ctx, cancel := bound(ctx, callSetCPUs)
	defer cancel()
	resp, err := g.c.API().SetCPUs(ctx, &pb.SetCPUsRequest{Sockets: int32(sockets)})
	if err != nil {
		return DomainState{}, fmt.Errorf("set cpus: %w", err)
	}
	return g.domainState(resp.GetDomain())
}

func (g *grpcLauncher) SetMemory(ctx context.Context, requestedMiB int) (DomainState, error) {
	ctx, cancel := bound(ctx, callSetMemory)
	defer cancel()
	resp, err := g.c.API().SetMemory(ctx, &pb.SetMemoryRequest{RequestedMib: int32(requestedMiB)})
	if err != nil {
		return DomainState{}, fmt.Errorf("set memory: %w", err)
	}
	return g.domainState(resp.GetDomain())
}

// hotChangeGiveUp is how long a change may wait on the guest (a vCPU it does not release,
// memory its virtio-mem driver does not unplug) before the condition turns False with the
// reason; the agent keeps watching after that (and asks again for memory, memoryReask).
const hotChangeGiveUp = 60 * time.Second

// hotChangeRetry is how often a pending change is looked at when no launcher event came.
const hotChangeRetry = 2 * time.Second

// memoryReask is how often a memory change the guest has not completed is asked again. QEMU
// tells the guest again even when the size did not change, and Linux's virtio-mem driver then
// tries at once; left alone, it retries memory it could not unplug (pages briefly pinned)
// after a back-off that doubles up to 5 minutes.
const memoryReask = 10 * time.Second

// memoryAskDue reports whether the VMI's memory size is to be asked of its launcher again
// (memoryReask since the last ask over this connection) and, if so, records the ask now.
func (r *VMIReconciler) memoryAskDue(uid types.UID, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.conns[uid]
	if c == nil || now.Sub(c.memAsked) < memoryReask {
		return false
	}
	c.memAsked = now
	return true
}

// memoryAsked records an ask of the VMI's memory size over its launcher connection.
func (r *VMIReconciler) memoryAsked(uid types.UID, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.conns[uid]; c != nil {
		c.memAsked = now
	}
}

// refused reports whether a launcher error is its final answer to this request (out of range,
// no hotplug in the domain, not implemented), not a transient failure worth retrying.
// refusalMessage is the launcher's own words for a refusal (the gRPC status message, without
// "rpc error: code = ... desc =").
func refusalMessage(err error) string {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Message()
	}
	return err.Error()
}

func refused(err error) bool {
	switch status.Code(err) { // finds a wrapped gRPC status
	case codes.InvalidArgument, codes.FailedPrecondition, codes.Unimplemented, codes.OutOfRange:
		return true
	}
	return false
}

// reconcileResources makes the running guest's vCPU sockets and memory match
// spec.domain.cpu.sockets and spec.domain.memory.guest (VMIs with maxSockets / maxGuest),
// records the boot values and the current ones in the status, and sets HotVCPUChange and
// HotMemoryChange while a change is in flight (removed once done). It returns how soon to look
// again (0: the launcher's ResourceEvent will wake the VMI) and a transient error (retried with
// back-off). A refusal is a False condition with the reason and a Warning event, never an error.
func (r *VMIReconciler) reconcileResources(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, l Launcher, dom DomainState, spec *qemu.Spec) (time.Duration, error) {
	cpu, mem := translate.HasCPUHotplug(vmi), translate.HasMemoryHotplug(vmi)
	if !cpu {
		meta.RemoveStatusCondition(&vmi.Status.Conditions, vmletv1.VirtualMachineInstanceVCPUChange)
	}
	if !mem {
		meta.RemoveStatusCondition(&vmi.Status.Conditions, vmletv1.VirtualMachineInstanceMemoryChange)
	}
	if !cpu && !mem || (dom.State != DomainRunning && dom.State != DomainPaused) {
		return 0, nil
	}
	recordBoot(vmi, dom, spec)
	// No change while the guest is paused (it could not online a vCPU) or migrating (the
	// target is made with the topology the migration started with).
	act := dom.State == DomainRunning && r.migrationRun(vmi.UID) == nil
	hp, _ := l.(ResourceHotplugger)
	var again time.Duration
	var errs []error
	if cpu {
		d, err := r.reconcileVCPUs(ctx, vmi, hp, dom, act)
		again, errs = soonest(again, d), append(errs, err)
	}
	if mem {
		d, err := r.reconcileMemory(ctx, vmi, hp, dom, spec, act)
		again, errs = soonest(again, d), append(errs, err)
	}
	return again, errors.Join(errs...)
}

func soonest(a, b time.Duration) time.Duration {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// recordBoot writes the sockets and memory the domain booted with once (the translation's
// boot topology from then on: translate.BootSockets, BootMemoryMiB).
func recordBoot(vmi *vmletv1.VirtualMachineInstance, dom DomainState, spec *qemu.Spec) {
	if translate.HasCPUHotplug(vmi) && vmi.Status.Launcher == nil {
		vmi.Status.Launcher = &vmletv1.LauncherStatus{}
	}
	if translate.HasCPUHotplug(vmi) && vmi.Status.Launcher.SocketsAtBoot == 0 {
		boot := dom.BootSockets
		if boot == 0 {
			boot = spec.CPU.Sockets
		}
		vmi.Status.Launcher.SocketsAtBoot = int32(max(boot, 1))
	}
	if translate.HasMemoryHotplug(vmi) {
		if vmi.Status.Memory == nil {
			vmi.Status.Memory = &vmletv1.MemoryStatus{}
		}
		if vmi.Status.Memory.GuestAtBoot == nil {
			b := int64(spec.MemoryMiB) << 20
			if dom.Memory != nil && dom.Memory.BootBytes > 0 {
				b = dom.Memory.BootBytes
			}
			vmi.Status.Memory.GuestAtBoot = resource.NewQuantity(b, resource.BinarySI)
		}
	}
}

// reconcileVCPUs plugs or unplugs sockets. Growing gives the launcher the CPU of the new vCPUs
// first; shrinking takes it back once the guest released them.
func (r *VMIReconciler) reconcileVCPUs(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, hp ResourceHotplugger, dom DomainState, act bool) (time.Duration, error) {
	const cond = vmletv1.VirtualMachineInstanceVCPUChange
	want := translate.WantedSockets(vmi)
	c := dom.CPU
	if c == nil || hp == nil {
		if want != translate.BootSockets(vmi) {
			r.hotRefused(vmi, cond, vmistatus.ReasonHotplugUnsupported, "this vmi's domain has no CPU hotplug (its launcher predates it): spec.domain.cpu.sockets applies from the next start")
		} else {
			meta.RemoveStatusCondition(&vmi.Status.Conditions, cond)
		}
		return 0, nil
	}
	if act && c.Sockets-c.UnplugPending != want {
		grow := want > c.Sockets-c.UnplugPending
		if grow {
			if wait, ok := r.growLauncher(ctx, vmi, cond, "vCPUs"); !ok {
				return wait, nil
			}
		}
		vmistatus.SetCondition(vmi, cond, true, vmistatus.ReasonHotplugInProgress, fmt.Sprintf("changing vCPU sockets from %d to %d", c.Sockets-c.UnplugPending, want))
		sctx, cancel := ctx, context.CancelFunc(func() {})
		if !grow {
			// The launcher waits for the guest to eject vCPUs until a little before this
			// deadline: a pass holds its worker at most unplugTimeout, then the unplug is
			// pending (its ResourceEvent wakes the VMI).
			sctx, cancel = context.WithTimeout(ctx, unplugTimeout)
		}
		d, err := hp.SetCPUs(sctx, want)
		cancel()
		if refused(err) {
			r.hotRefused(vmi, cond, vmistatus.ReasonHotplugRefused, refusalMessage(err))
			return 0, nil
		}
		if err != nil {
			return 0, err // transient: back-off
		}
		if d.CPU != nil {
			c = d.CPU
		}
		r.Recorder.Eventf(vmi, nil, "Normal", string(vmistatus.ReasonVCPUsChanged), "HotplugCPU", "vCPU sockets %d → %d asked (%d present, %d unplug pending)", dom.CPU.Sockets-dom.CPU.UnplugPending, want, c.Sockets, c.UnplugPending)
		if grow {
			// The new vCPU threads join their low-weight group like the boot ones.
			if p, ok := r.Runtime.(VCPUPlacer); ok {
				if tids, err := hpThreads(ctx, hp); err == nil {
					_ = p.PlaceVCPUs(string(vmi.UID), d.Pid, tids)
				}
			}
		}
	}
	vmi.Status.CurrentCPUTopology = &vmletv1.CPUTopology{Sockets: uint32(c.Sockets), Cores: uint32(max(c.Cores, 1)), Threads: uint32(max(c.Threads, 1))}
	if c.Sockets == want && c.UnplugPending == 0 {
		if meta.FindStatusCondition(vmi.Status.Conditions, cond) != nil {
			// Done: a shrink gives back the CPU of the vCPUs that left.
			if wait, ok := r.shrinkLauncher(ctx, vmi, cond); !ok {
				return wait, nil
			}
		}
		meta.RemoveStatusCondition(&vmi.Status.Conditions, cond)
		return 0, nil
	}
	if !act {
		vmistatus.SetCondition(vmi, cond, true, vmistatus.ReasonHotplugInProgress, fmt.Sprintf("%d vCPU sockets present, %d asked: applied once the guest runs here", c.Sockets, want))
		return 0, nil
	}
	msg := fmt.Sprintf("%d vCPU sockets present, %d asked: the guest has not released %d yet", c.Sockets, want, c.UnplugPending)
	return r.hotPending(vmi, cond, vmistatus.ReasonCPUUnplugPending, vmistatus.ReasonCPUUnplugIncomplete, msg), nil
}

// hpThreads reads the vCPU thread ids when the hotplugger is a full Launcher.
func hpThreads(ctx context.Context, hp ResourceHotplugger) ([]int, error) {
	l, ok := hp.(Launcher)
	if !ok {
		return nil, errors.New("no vcpu threads")
	}
	return l.VCPUThreads(ctx)
}

// reconcileMemory sets the virtio-mem requested size to spec guest - boot. In local mode the
// launcher's cgroup has no memory limit to follow; a launcher pod is resized before growing.
func (r *VMIReconciler) reconcileMemory(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, hp ResourceHotplugger, dom DomainState, spec *qemu.Spec, act bool) (time.Duration, error) {
	const cond = vmletv1.VirtualMachineInstanceMemoryChange
	m := dom.Memory
	want := int64(translate.MemoryRequestMiB(vmi, spec.MemoryHotplug, spec.MemoryMiB)) << 20
	if m == nil || hp == nil {
		if g := vmi.Spec.Domain.Memory.Guest; g != nil && g.Value() > int64(spec.MemoryMiB)<<20 {
			r.hotRefused(vmi, cond, vmistatus.ReasonHotplugUnsupported, "this vmi's domain has no virtio-mem device (its launcher predates memory hotplug, or maxGuest leaves no 2 MiB block): spec.domain.memory.guest applies from the next start")
		} else {
			meta.RemoveStatusCondition(&vmi.Status.Conditions, cond)
		}
		return 0, nil
	}
	if act && m.RequestedBytes != want {
		grow := want > m.RequestedBytes
		if grow {
			if wait, ok := r.growLauncher(ctx, vmi, cond, "memory"); !ok {
				return wait, nil
			}
		}
		vmistatus.SetCondition(vmi, cond, true, vmistatus.ReasonHotplugInProgress, fmt.Sprintf("changing the hotplugged memory from %dMi to %dMi", m.RequestedBytes>>20, want>>20))
		d, err := hp.SetMemory(ctx, int(want>>20))
		r.memoryAsked(vmi.UID, time.Now())
		if refused(err) {
			r.hotRefused(vmi, cond, vmistatus.ReasonHotplugRefused, refusalMessage(err))
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		if d.Memory != nil {
			m = d.Memory
		}
		r.Recorder.Eventf(vmi, nil, "Normal", string(vmistatus.ReasonMemoryChanged), "HotplugMemory", "guest memory %s asked (%dMi hotplugged, %dMi plugged now)", vmi.Spec.Domain.Memory.Guest.String(), want>>20, m.PluggedBytes>>20)
	}
	boot := m.BootBytes
	vmi.Status.Memory.GuestCurrent = resource.NewQuantity(boot+m.PluggedBytes, resource.BinarySI)
	vmi.Status.Memory.GuestRequested = resource.NewQuantity(boot+m.RequestedBytes, resource.BinarySI)
	if m.RequestedBytes == want && m.PluggedBytes == want {
		if meta.FindStatusCondition(vmi.Status.Conditions, cond) != nil {
			if wait, ok := r.shrinkLauncher(ctx, vmi, cond); !ok {
				return wait, nil
			}
		}
		meta.RemoveStatusCondition(&vmi.Status.Conditions, cond)
		return 0, nil
	}
	if !act {
		vmistatus.SetCondition(vmi, cond, true, vmistatus.ReasonHotplugInProgress, fmt.Sprintf("%dMi hotplugged, %dMi asked: applied once the guest runs here", m.PluggedBytes>>20, want>>20))
		return 0, nil
	}
	if m.RequestedBytes == want && r.memoryAskDue(vmi.UID, time.Now()) {
		// Asked again (no event: nothing new asked); the launcher's answer is the latest word.
		d, err := hp.SetMemory(ctx, int(want>>20))
		if err != nil {
			return 0, err
		}
		if d.Memory != nil {
			m = d.Memory
			vmi.Status.Memory.GuestCurrent = resource.NewQuantity(boot+m.PluggedBytes, resource.BinarySI)
		}
	}
	msg := fmt.Sprintf("the guest's virtio-mem driver has plugged %dMi of the %dMi asked", m.PluggedBytes>>20, m.RequestedBytes>>20)
	return r.hotPending(vmi, cond, vmistatus.ReasonMemoryPlugPending, vmistatus.ReasonMemoryChangeIncomplete, msg), nil
}

// hotPending sets a change waiting on the guest: True with pending, or False with incomplete
// once it waited hotChangeGiveUp. It is looked at again in hotChangeRetry.
func (r *VMIReconciler) hotPending(vmi *vmletv1.VirtualMachineInstance, cond string, pending, incomplete vmistatus.Reason, msg string) time.Duration {
	c := meta.FindStatusCondition(vmi.Status.Conditions, cond)
	if c != nil && (c.Reason == string(incomplete) || (c.Status == "True" && time.Since(c.LastTransitionTime.Time) > hotChangeGiveUp)) {
		r.hotRefused(vmi, cond, incomplete, fmt.Sprintf("%s after %s", msg, hotChangeGiveUp))
		return hotChangeRetry
	}
	vmistatus.SetCondition(vmi, cond, true, pending, msg)
	return hotChangeRetry
}

// hotRefused sets a change that cannot be applied: False with the reason, and a Warning event
// when the reason is new.
func (r *VMIReconciler) hotRefused(vmi *vmletv1.VirtualMachineInstance, cond string, reason vmistatus.Reason, msg string) {
	if c := meta.FindStatusCondition(vmi.Status.Conditions, cond); c == nil || c.Reason != string(reason) {
		r.Recorder.Eventf(vmi, nil, "Warning", string(reason), cond, "%s", msg)
	}
	vmistatus.SetCondition(vmi, cond, false, reason, msg)
}

// growLauncher resizes the launcher before more is plugged: ok when it has the resources; else
// the condition says why (True LauncherResizing while its pod's kubelet applies the resize,
// False ResizeRefused when it cannot be) and nothing is plugged.
func (r *VMIReconciler) growLauncher(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, cond, what string) (time.Duration, bool) {
	err := r.resizeLauncher(ctx, vmi)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, process.ErrResizing):
		vmistatus.SetCondition(vmi, cond, true, vmistatus.ReasonLauncherResizing, fmt.Sprintf("waiting for the launcher's resources to grow before plugging %s: %v", what, err))
	default:
		r.hotRefused(vmi, cond, vmistatus.ReasonResizeRefused, fmt.Sprintf("not plugging %s: the launcher's resources could not grow: %v", what, err))
	}
	return hotChangeRetry, false
}

// shrinkLauncher resizes the launcher once an unplug is done: ok when it is; else the change
// stays in flight (True LauncherResizing) or says why it cannot shrink (False ResizeRefused,
// retried: the guest already gave the resources back).
func (r *VMIReconciler) shrinkLauncher(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, cond string) (time.Duration, bool) {
	err := r.resizeLauncher(ctx, vmi)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, process.ErrResizing):
		vmistatus.SetCondition(vmi, cond, true, vmistatus.ReasonLauncherResizing, fmt.Sprintf("the guest released them; the launcher's resources shrink: %v", err))
	default:
		r.hotRefused(vmi, cond, vmistatus.ReasonResizeRefused, fmt.Sprintf("the guest released them, but the launcher's resources could not shrink: %v", err))
	}
	return hotChangeRetry, false
}

// resizeLauncher makes the launcher's resources those of the spec's vCPUs and memory (the
// runtime's LauncherResizer; a runtime without it has nothing derived from them).
func (r *VMIReconciler) resizeLauncher(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) error {
	rs, ok := r.Runtime.(LauncherResizer)
	if !ok {
		return nil
	}
	cpu := launcherpod.CPURequest(vmi)
	res := process.Resources{CPUMilli: cpu.MilliValue()}
	pod, err := launcherpod.Resources(vmi, r.Env(r.Runtime.Dir(string(vmi.UID))).TCGCacheMiB)
	if err != nil {
		return err
	}
	res.Pod = pod
	return rs.Resize(ctx, string(vmi.UID), res)
}
