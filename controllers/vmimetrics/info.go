package vmimetrics

import (
	"cmp"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/translate"
)

// annotationPrefix holds KubeVirt's os, workload and flavor annotations (vm.kubevirt.io/os, …).
const annotationPrefix = "vm.kubevirt.io/"

// Identity is who the VMI's series are about: its node, namespace, name and labels.
func Identity(vmi *vmletv1.VirtualMachineInstance) VMI {
	id := VMI{Node: vmi.Status.NodeName, Namespace: vmi.Namespace, Name: vmi.Name, Labels: vmi.Labels}
	if ifs := vmi.Spec.Domain.Devices.Interfaces; len(ifs) > 0 {
		id.Interfaces = make(map[string]string, len(ifs))
		for _, i := range ifs {
			id.Interfaces[translate.NICID(i.Name)] = i.Name
		}
	}
	return id
}

// VMIInfo is kubevirt_vmi_info for the VMI, with virt-controller's labels: the phase in lower
// case, the os/workload/flavor annotations, the guest agent's OS, the machine type, whether it
// is evictable. vmlet has no instance types, preferences or outdated launcher images; its
// launcher pod name is not on the VMI: those labels are empty, as KubeVirt leaves unknown ones.
func VMIInfo(vmi *vmletv1.VirtualMachineInstance) prometheus.Metric {
	a := vmi.Annotations
	g := vmi.Status.GuestOSInfo
	machine := ""
	if vmi.Status.Machine != nil {
		machine = vmi.Status.Machine.Type
	}
	s := &series{}
	s.add(Info, 1,
		vmi.Status.NodeName, vmi.Namespace, vmi.Name,
		strings.ToLower(string(vmi.Status.Phase)),
		a[annotationPrefix+"os"], a[annotationPrefix+"workload"], a[annotationPrefix+"flavor"],
		"", "",
		g.KernelRelease, machine, g.Machine, g.Name, g.VersionID,
		strconv.FormatBool(evictable(vmi)), "false", "")
	return s.out[0]
}

// evictable is KubeVirt's isVMEvictable: a VMI that should live-migrate on eviction but is not
// (yet) known to be migratable is not.
func evictable(vmi *vmletv1.VirtualMachineInstance) bool {
	es := vmi.Spec.EvictionStrategy
	if es == nil || *es != vmletv1.EvictionStrategyLiveMigrate {
		return true
	}
	c := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceIsMigratable)
	return c != nil && c.Status == metav1.ConditionTrue
}

// Overhead is kubevirt_vmi_launcher_memory_overhead_bytes: the launcher's memory beyond the
// guest's RAM as vmlet budgets it (launcherpod.MemoryOverhead).
func Overhead(vmi *vmletv1.VirtualMachineInstance, bytes int64) prometheus.Metric {
	s := &series{}
	s.add(LauncherOverhead, float64(bytes), vmi.Namespace, vmi.Name)
	return s.out[0]
}

// BudgetedOverhead is a Source.Overhead: the memory beyond the guest's RAM a launcher pod
// budgets (launcherpod.MemoryOverhead), with the node's TCG translation cache unless it runs
// KVM (a cache of 0 is QEMU's own default size, as for the pods).
func BudgetedOverhead(kvm bool, tcgCacheMiB int) func(*vmletv1.VirtualMachineInstance) (int64, bool) {
	tcg := 0
	if !kvm {
		tcg = cmp.Or(tcgCacheMiB, launcherpod.QEMUDefaultTCGCacheMiB)
	}
	return func(vmi *vmletv1.VirtualMachineInstance) (int64, bool) {
		guest, err := launcherpod.GuestMemory(vmi)
		if err != nil {
			return 0, false
		}
		return launcherpod.MemoryOverhead(guest, launcherpod.VCPUs(vmi), tcg) + launcherpod.DisplayOverhead(vmi), true
	}
}
