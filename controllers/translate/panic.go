package translate

import (
	"fmt"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu"
)

// panicDevices maps spec.domain.devices.panicDevices to the driver's panic devices as libvirt
// maps KubeVirt's <panic model=...> on x86_64: isa (and a missing model, libvirt's default
// there) is QEMU's ISA pvpanic, pvpanic is pvpanic-pci. hyperv (hv-crash) is refused: the API
// refuses it already; a VMI stored under an older CRD fails Unsupported here rather than
// start without the device it asked for. Each model at most once (the API checks it too).
func panicDevices(vmi *vmletv1.VirtualMachineInstance) ([]qemu.PanicModel, error) {
	var out []qemu.PanicModel
	for i, p := range vmi.Spec.Domain.Devices.PanicDevices {
		field := fmt.Sprintf("spec.domain.devices.panicDevices[%d].model", i)
		m := vmletv1.PanicDeviceISA
		if p.Model != nil {
			m = *p.Model
		}
		var q qemu.PanicModel
		switch m {
		case vmletv1.PanicDeviceISA:
			q = qemu.PanicISA
		case vmletv1.PanicDevicePvpanic:
			q = qemu.PanicPCI
		case vmletv1.PanicDeviceHyperv:
			return nil, &SpecError{Field: field, Reason: "the hyperv panic device is not supported (Hyper-V crash MSRs need KVM and Hyper-V enlightenments): use isa or pvpanic", Err: ErrUnsupported}
		default:
			return nil, &SpecError{Field: field, Reason: fmt.Sprintf("unknown panic device model %q", m)}
		}
		for _, o := range out {
			if o == q {
				return nil, &SpecError{Field: field, Reason: fmt.Sprintf("panic device model %q listed twice", m)}
			}
		}
		out = append(out, q)
	}
	return out, nil
}
