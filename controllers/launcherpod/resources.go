package launcherpod

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// Memory overhead terms (bytes), measured on QEMU 7.2 under TCG (2-core Xeon, Debian 12) with the
// project's test guest started as the node agent starts it (q35, serial, guest agent channel,
// SCSI controller, 4 hotplug ports, tb-size 32): BenchmarkQEMUOverhead in this package, which
// splits QEMU's RSS by mapping, and qemu/launcher's BenchmarkLauncherMemory.
//
//	launcher                   15.9 MiB RSS with a running guest (BENCHMARKS.md)     → 20 MiB
//	QEMU beyond guest RAM and  62.3 MiB at 1 vCPU (256 MiB and 1 GiB guests alike),  → 70 MiB
//	  the TCG cache            61.7 at 2 vCPUs, 65.6–67.7 at 8 vCPUs
//	per vCPU                   ≈0.5–0.8 MiB per extra vCPU when idle; TCG's per-vCPU  → 2 MiB
//	                           softmmu TLBs grow with guest activity, hence the margin
//	TCG translation cache      the whole tb-size (32.0 of 32 MiB resident right after boot;
//	                           a Debian 12 boot fills 128 MiB too, bench/tcgcache)
//	page tables                VmPTE 0.6–0.8 MiB; guest/512 (8 bytes per 4 KiB page)
//	                           when the guest touched all of its RAM, as in KubeVirt
//
// So a 1-vCPU 256 MiB guest under TCG measured 94.9 MiB of QEMU overhead (page tables
// included) against the formula's 104.5 MiB (tb-size 32), and with the default tb-size of 128
// (DefaultTCGCacheMiB) its pod asks for 256 + 220.5 → 477 MiB.
// KubeVirt budgets ≈ 240 MiB of fixed overhead (virt-launcher, its monitor, virtqemud,
// virtlogd, QEMU) plus 8 MiB per vCPU, 8 MiB for an IO thread and 16 MiB of video RAM; vmlet has
// no libvirt daemons, and budgets the video RAM of the default display (DisplayOverhead).
const (
	LauncherOverhead   = 20 << 20
	QEMUBaseOverhead   = 70 << 20
	QEMUPerVCPU        = 2 << 20
	pageTableFraction  = 512
	maxGuestMemory     = 16 << 40 // larger guests are refused (and int64 math stays safe)
	defaultGuestMemory = 128 << 20
)

// DefaultTCGCacheMiB is the TCG translation cache per VM (MiB) that the node agents give every
// TCG guest and that launcher pods budget: the default of both --tcg-cache-mib flags, which must
// agree. QEMU keeps the whole size resident once a guest has run long enough to fill it (a
// Debian 12 boot fills 128 MiB). Chosen by measurement (bench/tcgcache, BENCHMARKS.md "TCG
// translation cache size"): the smallest size whose next doubling cut the median QEMU CPU time
// to the login prompt by less than 10 % (32 → 64 and 64 → 128 did by more, 128 → 256 did not).
const DefaultTCGCacheMiB = 128

// QEMUDefaultTCGCacheMiB is QEMU 7.2's own translation cache when given no tb-size (1 GiB on a
// 64-bit host with 8 GiB of RAM or more): what a pod budgets for --tcg-cache-mib=0. A Debian 12
// boot alone left ≈600 MiB of it resident (bench/tcgcache).
const QEMUDefaultTCGCacheMiB = 1024

// CPUPerVCPU is the CPU request per vCPU when the VMI requests no CPU: a tenth of a core, as
// KubeVirt's default cpuAllocationRatio of 10 gives. vCPUs are not limited (no CFS quota)
// unless the VMI sets resources.limits.cpu.
var CPUPerVCPU = resource.MustParse("100m")

// QEMUOverhead is QEMU's memory beyond the guest's RAM (bytes) for a guest of guestBytes with
// vcpus vCPUs; tcgCacheMiB is the TCG translation cache (0 under KVM).
func QEMUOverhead(guestBytes, vcpus int64, tcgCacheMiB int) int64 {
	return QEMUBaseOverhead + max(vcpus, 1)*QEMUPerVCPU + guestBytes/pageTableFraction + int64(max(tcgCacheMiB, 0))<<20
}

// VideoOverhead is the display's video RAM: QEMU's VGA has 16 MiB (vgamem_mb), resident as far
// as the guest draws into it (the test guest's text console added 2.4 MiB of QEMU RSS,
// BenchmarkStartToGuestReadyDisplay in package qemu), budgeted whole as KubeVirt does.
const VideoOverhead = 16 << 20

// DisplayOverhead is VideoOverhead for a VMI with a display (autoattachGraphicsDevice unset or
// true, as the translation decides), else 0.
func DisplayOverhead(vmi *vmletv1.VirtualMachineInstance) int64 {
	if a := vmi.Spec.Domain.Devices.AutoattachGraphicsDevice; a != nil && !*a {
		return 0
	}
	return VideoOverhead
}

// MemoryOverhead is the launcher pod's memory beyond the guest's RAM (bytes): the launcher's
// own and QEMU's.
func MemoryOverhead(guestBytes, vcpus int64, tcgCacheMiB int) int64 {
	return LauncherOverhead + QEMUOverhead(guestBytes, vcpus, tcgCacheMiB)
}

// GuestMemory is the guest RAM QEMU gets (bytes): spec.domain.memory.guest, else
// resources.requests.memory, else resources.limits.memory, rounded up to whole MiB as the node
// agent's translation does.
func GuestMemory(vmi *vmletv1.VirtualMachineInstance) (int64, error) {
	d := &vmi.Spec.Domain
	var q *resource.Quantity
	field := "spec.domain.memory.guest"
	switch {
	case d.Memory != nil && d.Memory.Guest != nil:
		q = d.Memory.Guest
	case nonZero(d.Resources.Requests, vmletv1.ResourceMemory):
		v := d.Resources.Requests[vmletv1.ResourceMemory]
		q, field = &v, "spec.domain.resources.requests.memory"
	case nonZero(d.Resources.Limits, vmletv1.ResourceMemory):
		v := d.Resources.Limits[vmletv1.ResourceMemory]
		q, field = &v, "spec.domain.resources.limits.memory"
	default:
		return defaultGuestMemory, nil
	}
	if q.Cmp(*resource.NewQuantity(1<<20, resource.BinarySI)) < 0 || q.Cmp(*resource.NewQuantity(maxGuestMemory, resource.BinarySI)) > 0 {
		return 0, fmt.Errorf("%s: %s is not a usable guest memory size (1Mi to 16Ti)", field, q.String())
	}
	return roundMiB(q.Value()), nil
}

func roundMiB(b int64) int64 { return (b + 1<<20 - 1) &^ (1<<20 - 1) }

// VCPUs is sockets × cores × threads (unset counts are 1).
func VCPUs(vmi *vmletv1.VirtualMachineInstance) int64 {
	c := vmi.Spec.Domain.CPU
	if c == nil {
		return 1
	}
	n := int64(1)
	for _, v := range []uint32{c.Sockets, c.Cores, c.Threads} {
		if v > 0 {
			n *= int64(v)
		}
	}
	return n
}

// Resources are the launcher container's resources: memory requests = limits = guest memory
// + MemoryOverhead + DisplayOverhead (with overcommitGuestOverhead the request is the guest memory alone, as in
// KubeVirt); CPU requests from resources.requests.cpu, else CPUPerVCPU per vCPU; a CPU limit
// only when the VMI sets one. tcgCacheMiB is the node's TCG translation cache, 0 when the VMI
// runs on KVM nodes only.
func Resources(vmi *vmletv1.VirtualMachineInstance, tcgCacheMiB int) (corev1.ResourceRequirements, error) {
	guest, err := GuestMemory(vmi)
	if err != nil {
		return corev1.ResourceRequirements{}, err
	}
	vcpus := VCPUs(vmi)
	// Whole MiB, so that the pod reads "373Mi" rather than "381440Ki".
	total := resource.NewQuantity(roundMiB(guest+MemoryOverhead(guest, vcpus, tcgCacheMiB)+DisplayOverhead(vmi)), resource.BinarySI)
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: *total},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: *total},
	}
	if vmi.Spec.Domain.Resources.OvercommitGuestOverhead {
		res.Requests[corev1.ResourceMemory] = *resource.NewQuantity(guest, resource.BinarySI)
	}
	res.Requests[corev1.ResourceCPU] = CPURequest(vmi)
	if d := &vmi.Spec.Domain.Resources; nonZero(d.Limits, vmletv1.ResourceCPU) {
		res.Limits[corev1.ResourceCPU] = d.Limits[vmletv1.ResourceCPU].DeepCopy()
	}
	return res, nil
}

// CPURequest is the launcher's CPU request: spec.domain.resources.requests.cpu, else
// CPUPerVCPU per vCPU (sockets × cores × threads), at most resources.limits.cpu. It is the
// launcher pod's CPU request in cluster mode, from which the kubelet derives the pod cgroup's
// cpu.shares (milli × 1024 / 1000) or cpu.weight; local mode gives the VM's cgroup the same
// weight (package cpuweight).
func CPURequest(vmi *vmletv1.VirtualMachineInstance) resource.Quantity {
	d := &vmi.Spec.Domain.Resources
	req := *resource.NewMilliQuantity(CPUPerVCPU.MilliValue()*VCPUs(vmi), resource.DecimalSI)
	if nonZero(d.Requests, vmletv1.ResourceCPU) {
		req = d.Requests[vmletv1.ResourceCPU].DeepCopy()
	}
	if nonZero(d.Limits, vmletv1.ResourceCPU) && req.Cmp(d.Limits[vmletv1.ResourceCPU]) > 0 {
		req = d.Limits[vmletv1.ResourceCPU].DeepCopy()
	}
	return req
}

func nonZero(l vmletv1.ResourceList, n vmletv1.ResourceName) bool {
	q, ok := l[n]
	return ok && !q.IsZero()
}
