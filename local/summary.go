package local

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// Summary is the line `vmlet local` prints about a VMI: its phase, the reason of a final or
// not-ready phase, its guest addresses (status.interfaces), the accelerator and, when the guest
// is emulated, why. Unknown parts are left out, never printed empty.
func Summary(vmi *vmletv1.VirtualMachineInstance) string {
	st := vmi.Status
	var parts []string
	head := fmt.Sprintf("VMI %s/%s is %s", vmi.Namespace, vmi.Name, Phase(vmi))
	var ips []string
	for _, i := range st.Interfaces {
		addrs := i.IPs
		if len(addrs) == 0 && i.IP != "" {
			addrs = []string{i.IP}
		}
		if len(addrs) == 0 {
			continue
		}
		s := strings.Join(addrs, ", ")
		if i.Name != "" {
			s += " (" + i.Name + ")"
		}
		ips = append(ips, s)
	}
	if len(ips) > 0 {
		parts = append(parts, "IP "+strings.Join(ips, "; "))
	}
	if l := st.Launcher; l != nil && l.Accelerator != "" {
		a := "accelerator " + string(l.Accelerator)
		if l.Accelerator != vmletv1.AcceleratorKVM {
			a += ", emulated"
			if l.AccelerationReason != "" {
				a += ": " + l.AccelerationReason
			}
		}
		parts = append(parts, a)
	}
	if l := st.Launcher; l != nil && l.PID > 0 {
		p := fmt.Sprintf("QEMU pid %d", l.PID)
		if l.QEMUVersion != "" {
			p = fmt.Sprintf("QEMU %s pid %d", l.QEMUVersion, l.PID)
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return head
	}
	return head + "; " + strings.Join(parts, "; ")
}

// Phase is the VMI's phase with the reason (and message) of a final phase, or why a running VMI
// is not ready, e.g. "Failed (NodeShutdown: ...)".
func Phase(vmi *vmletv1.VirtualMachineInstance) string {
	st := vmi.Status
	phase := string(st.Phase)
	if phase == "" {
		phase = "Pending"
	}
	ready := meta.FindStatusCondition(st.Conditions, vmletv1.VirtualMachineInstanceReady)
	switch {
	case st.Reason != "" && ready != nil && ready.Message != "":
		return fmt.Sprintf("%s (%s: %s)", phase, st.Reason, ready.Message)
	case st.Reason != "":
		return fmt.Sprintf("%s (%s)", phase, st.Reason)
	case st.Phase == vmletv1.Running && ready != nil && ready.Status != "True" && ready.Reason != "":
		return fmt.Sprintf("%s (not ready: %s)", phase, ready.Reason)
	}
	return phase
}
