package translate

import (
	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu"
)

// Memory balloon defaults, as KubeVirt's converter sets them for <memballoon model='virtio'>:
// statistics every 10 s (its default MemBalloonStatsPeriod) and free page reporting unless
// the VMI opts out with KubeVirt's annotation. KubeVirt also turns free page reporting off
// for dedicated CPUs, hugepages and realtime, which vmlet rejects as unsupported fields.
const (
	balloonStatsPeriodSeconds = 10
	// AnnotationFreePageReportingDisabled, set to "true", turns free page reporting off.
	AnnotationFreePageReportingDisabled = "kubevirt.io/free-page-reporting-disabled"
)

// memBalloon is the VMI's balloon: none when spec.domain.devices.autoattachMemBalloon is
// false, else a virtio balloon (the default is true, as in KubeVirt).
func memBalloon(vmi *vmletv1.VirtualMachineInstance) *qemu.Balloon {
	if a := vmi.Spec.Domain.Devices.AutoattachMemBalloon; a != nil && !*a {
		return nil
	}
	return &qemu.Balloon{
		StatsPeriodSeconds: balloonStatsPeriodSeconds,
		FreePageReporting:  vmi.Annotations[AnnotationFreePageReportingDisabled] != "true",
	}
}
