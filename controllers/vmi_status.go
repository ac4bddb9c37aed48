package controllers

import (
	"k8s.io/apimachinery/pkg/api/meta"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/qemu/launcher"
)

// fail ends the VMI with a reason (vmistatus.Fail: Failed phase, Synchronized=False,
// Ready=False) and a Warning event when it becomes Failed.
func (r *VMIReconciler) fail(vmi *vmletv1.VirtualMachineInstance, reason vmistatus.Reason, msg string) {
	if vmistatus.Fail(vmi, reason, msg) {
		r.Recorder.Eventf(vmi, nil, "Warning", string(reason), "Fail", "%s", msg)
	}
}

// launcherExited ends the VMI from how its launcher exited (vmistatus.Exited): 0 means the
// guest powered off by itself.
func (r *VMIReconciler) launcherExited(vmi *vmletv1.VirtualMachineInstance, ex *process.Exit) {
	o := vmistatus.Exited(ex.Code, ex.Signal, ex.Known)
	if o.Phase != vmletv1.Succeeded {
		r.fail(vmi, o.Reason, vmistatus.WithDetail(o.Message, ex.Detail))
		return
	}
	if vmistatus.Succeed(vmi) {
		r.Recorder.Eventf(vmi, nil, "Normal", string(o.Reason), "Stop", "%s", o.Message)
	}
}

// observeDomain writes the launcher's domain state into the VMI's status. Synchronized is not
// its business: only a pass that synced the domain (run) says True; the others say why not, or
// leave it as it was (storage being prepared again).
func (r *VMIReconciler) observeDomain(vmi *vmletv1.VirtualMachineInstance, d DomainState) {
	setLauncherProcess(vmi, d)
	setMigratable(vmi, d, r.Network.SpanningNetworks()...)
	if g := d.Guest; g != nil {
		// Kept when the agent goes (the OS did not change), replaced by its next answer.
		vmi.Status.GuestOSInfo = vmletv1.VirtualMachineInstanceGuestOSInfo{
			Name: g.OS.Name, KernelRelease: g.OS.KernelRelease, Version: g.OS.Version, PrettyName: g.OS.PrettyName,
			VersionID: g.OS.VersionID, KernelVersion: g.OS.KernelVersion, Machine: g.OS.Machine, ID: g.OS.ID,
		}
	}
	if d.AgentConnected {
		vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceAgentConnected, true, vmistatus.ReasonAgentConnected, "qemu-guest-agent answers")
	} else {
		meta.RemoveStatusCondition(&vmi.Status.Conditions, vmletv1.VirtualMachineInstanceAgentConnected)
	}
	switch d.State {
	case DomainRunning:
		vmistatus.SetPhase(vmi, vmletv1.Running)
		vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, true, vmistatus.ReasonRunning, "the guest is running")
		vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstancePaused, false, vmistatus.ReasonNotPaused, "")
	case DomainPaused:
		vmistatus.SetPhase(vmi, vmletv1.Running)
		vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, vmistatus.ReasonPaused, "the guest's vCPUs are stopped")
		vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstancePaused, true, vmistatus.PausedReason(d.Reason), "the guest's vCPUs are stopped")
	case DomainShuttingDown:
		vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, vmistatus.ReasonShuttingDown, "the guest is shutting down")
	case DomainShutoff:
		vmistatus.Succeed(vmi)
	case DomainCrashed:
		// QEMU ended on its own (crashed), or the guest panicked (QEMU's run state
		// guest-panicked, then its exit): the launcher is about to exit ExitQEMUDied or
		// ExitGuestPanicked. The same end, told the same way whichever the agent sees first
		// (the state or the exit).
		switch d.Reason {
		case launcher.ReasonCrashed:
			o := vmistatus.Exited(launcher.ExitQEMUDied, "", true)
			r.fail(vmi, o.Reason, vmistatus.WithDetail(o.Message, d.ExitDetail))
			return
		case launcher.ReasonGuestPanicked:
			o := vmistatus.Exited(launcher.ExitGuestPanicked, "", true)
			r.fail(vmi, o.Reason, vmistatus.WithDetail(o.Message, d.ExitDetail))
			return
		}
		// QEMU runs but the guest cannot go on (internal-error).
		r.fail(vmi, vmistatus.ReasonDomainCrashed, "the domain crashed: "+d.Reason)
	default:
		vmistatus.SetPhase(vmi, vmletv1.Scheduled)
		vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, vmistatus.ReasonStarting, "the domain is starting")
	}
}

// setMigratable sets LiveMigratable from the vmi's spec (migration.Migratable, with the
// secondary networks that span the nodes), as virt-handler does, and from the launcher's word
// on the running QEMU (d.MigrationRefused: a vCPU unplugged under TCG); the reason of False is
// KubeVirt's.
func setMigratable(vmi *vmletv1.VirtualMachineInstance, d DomainState, spanning ...string) {
	v := migration.Migratable(vmi, spanning...)
	if v.OK && d.MigrationRefused != "" {
		v = migration.Verdict{Reason: migration.ReasonHotplugNotMigratable, Message: "cannot migrate: " + d.MigrationRefused}
	}
	if v.OK {
		vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceIsMigratable, true, vmistatus.Reason(v.Reason), "")
		return
	}
	vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceIsMigratable, false, vmistatus.Reason(v.Reason), v.Message)
}

// setLauncherProcess writes status.launcher's facts of the launcher's QEMU (pid, accelerator,
// version) from d, keeping what others write there: the pod (the cluster controller's) and the
// sockets at boot (recordBoot's).
func setLauncherProcess(vmi *vmletv1.VirtualMachineInstance, d DomainState) {
	pod := ""
	var bootSockets int32
	if vmi.Status.Launcher != nil {
		pod, bootSockets = vmi.Status.Launcher.Pod, vmi.Status.Launcher.SocketsAtBoot
	}
	vmi.Status.Launcher = &vmletv1.LauncherStatus{
		Pod:                pod,
		SocketsAtBoot:      bootSockets,
		PID:                int64(d.Pid),
		Accelerator:        vmletv1.Accelerator(d.Accel),
		AccelerationReason: d.AccelReason,
		QEMUVersion:        d.QEMUVersion,
	}
}
