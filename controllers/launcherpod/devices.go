package launcherpod

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// DeviceLimits are the device plugin resources the launcher container asks for (limits only,
// as KubeVirt's virt-launcher does; the API server copies extended-resource limits into
// requests), one each:
//
//   - ResourceKVM unless emulation is allowed: the kubelet then puts /dev/kvm into the
//     container, and only nodes where KVM is usable advertise it.
//   - ResourceTun when the VMI has an interface (all of vmlet's bindings are taps): /dev/net/tun
//     in the container, for a launcher that opens its taps itself (a root launcher that was
//     handed none); an unprivileged launcher gets the tap files from the node agent.
//   - ResourceVhostNet never: vmlet's QEMU runs its taps with vhost=off (qemu/netdev.go), so a
//     pod asking for /dev/vhost-net would only be kept off nodes without it.
//
// The device program the node agent installs on the container (package devices) still
// decides what the launcher may open: these only make the device nodes exist in the container
// (and let the runtime's own device rules allow them). Pure.
func DeviceLimits(vmi *vmletv1.VirtualMachineInstance, allowEmulation bool) corev1.ResourceList {
	l := corev1.ResourceList{}
	one := resource.MustParse("1")
	if !allowEmulation {
		l[ResourceKVM] = one.DeepCopy()
	}
	if ifaces, _ := vmletv1.EffectiveNetworks(&vmi.Spec); len(ifaces) > 0 {
		l[ResourceTun] = one.DeepCopy()
	}
	return l
}

// ComputeResources are r's CPU and memory only: what in-place resize may change (the device
// resources of DeviceLimits stay as the pod was created).
func ComputeResources(r corev1.ResourceRequirements) corev1.ResourceRequirements {
	pick := func(l corev1.ResourceList) corev1.ResourceList {
		if l == nil {
			return nil
		}
		out := corev1.ResourceList{}
		for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if q, ok := l[n]; ok {
				out[n] = q.DeepCopy()
			}
		}
		return out
	}
	return corev1.ResourceRequirements{Limits: pick(r.Limits), Requests: pick(r.Requests)}
}
