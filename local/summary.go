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
	phase := string(st.Phase)
	if phase == "" {
		phase = "Pending"
	}
	head := fmt.Sprintf("VMI %s/%s is %s", vmi.Namespace, vmi.Name, phase)
	ready := meta.FindStatusCondition(st.Conditions, vmletv1.VirtualMachineInstanceReady)
	switch {
	case st.Reason != "" && ready != nil && ready.Message != "":
		head += fmt.Sprintf(" (%s: %s)", st.Reason, ready.Message)
	case st.Reason != "":
		head += fmt.Sprintf(" (%s)", st.Reason)
	case st.Phase == vmletv1.Running && ready != nil && ready.Status != "True" && ready.Reason != "":
		head += fmt.Sprintf(" (not ready: %s)", ready.Reason)
	}
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
