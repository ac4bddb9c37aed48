package migration

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// Reasons of LiveMigratable=False: KubeVirt's strings, plus one of vmlet's.
const (
	ReasonDisksNotMigratable     = "DisksNotLiveMigratable"
	ReasonInterfaceNotMigratable = "InterfaceNotLiveMigratable"
	ReasonCPUModeNotMigratable   = "CPUModeLiveMigratable" // sic: KubeVirt's value
	// ReasonHostDeviceNotMigratable never applies today: the API refuses host devices.
	ReasonHostDeviceNotMigratable = "HostDeviceNotLiveMigratable"
	// ReasonHotplugNotMigratable is KubeVirt's name for a hot-plugged device that cannot
	// move: in vmlet an interface of a secondary network that does not span the nodes (the
	// agent hot-plugs it into the running guest; a target could not give it its address), or
	// (the agent's word, from the launcher) a vCPU unplugged under TCG. (Hot-plugged disks
	// migrate like the others: their claims decide; so do interfaces of spanning networks.)
	ReasonHotplugNotMigratable = "HotplugNotLiveMigratable"
	// ReasonMigratable is LiveMigratable=True's reason.
	ReasonMigratable = "Migratable"
)

// Verdict is whether a vmi can be live-migrated, and why not.
type Verdict struct {
	OK      bool
	Reason  string
	Message string
	// Method says how its disks move: BlockMigration when node-local ones are copied.
	Method vmletv1.VirtualMachineInstanceMigrationMethod
}

// Migratable decides LiveMigratable from the vmi's spec and volume status. Node-local
// disks the migration copies (containerDisk, emptyDisk and ephemeral overlays; the claim below an
// ephemeral one must be shared, read-only will do) and media rebuilt on the
// target (cloud-init, kernel boot files) are fine, and so are claims bound ReadWriteMany
// (shared: a cluster's, or local mode's, which every node of the machine opens), hot-plugged
// or not; other claims and unshared hostDisks are not (vmlet does not copy them); a bridge binding on the pod network
// is not (the guest holds the pod's address, which the target pod does not have); neither is a
// host CPU model or a host device; nor is an interface of a secondary (multus) network other
// than those in spanning (networks that span the nodes: the interface keeps its address and
// MAC on the target). Pure.
func Migratable(vmi *vmletv1.VirtualMachineInstance, spanning ...string) Verdict {
	copied := false
	for _, v := range vmi.Spec.Volumes {
		switch {
		case v.HostDisk != nil:
			if v.HostDisk.Shared == nil || !*v.HostDisk.Shared {
				return no(ReasonDisksNotMigratable, "hostDisk %s is not shared between nodes (hostDisk.shared: true says it is)", v.Name)
			}
		case v.PersistentVolumeClaim != nil:
			if verdict, ok := claimMigratable(vmi, v.Name, "claim", v.PersistentVolumeClaim.ClaimName); !ok {
				return verdict
			}
		case v.DataVolume != nil:
			if verdict, ok := claimMigratable(vmi, v.Name, "dataVolume", v.DataVolume.Name); !ok {
				return verdict
			}
		case v.Ephemeral != nil:
			// Its overlay is copied (only what the guest wrote); the claim below it, which it
			// only reads, must be there on the target: read-only shared will do.
			if v.Ephemeral.PersistentVolumeClaim == nil {
				return no(ReasonDisksNotMigratable, "cannot migrate: ephemeral volume %s names no claim", v.Name)
			}
			if verdict, ok := claimMigratable(vmi, v.Name, "ephemeral volume's claim", v.Ephemeral.PersistentVolumeClaim.ClaimName, corev1.ReadOnlyMany); !ok {
				return verdict
			}
			copied = true
		case v.ContainerDisk != nil, v.EmptyDisk != nil:
			copied = true
		}
	}
	ifaces, nets := vmletv1.EffectiveNetworks(&vmi.Spec) // with KubeVirt's auto-attached bridge
	pod := map[string]bool{}
	for _, n := range nets {
		if n.Pod != nil {
			pod[n.Name] = true
		}
	}
	for _, i := range ifaces {
		if i.Bridge != nil && pod[i.Name] {
			return no(ReasonInterfaceNotMigratable, "cannot migrate VMI which does not use masquerade to connect to the pod network (interface %s uses a bridge binding)", i.Name)
		}
	}
	if c := vmi.Spec.Domain.CPU; c != nil && c.Model == "host-passthrough" {
		return no(ReasonCPUModeNotMigratable, "cannot migrate a VMI with cpu model host-passthrough: the target's CPU may differ")
	}
	if n, multus := secondaryNetwork(vmi, spanning); n != "" {
		msg := fmt.Sprintf("cannot migrate: network %s is a secondary (multus) network, %s, that does not span the nodes (each node's is a bridge of its own): its hot-plugged interface would lose its address on another node", n, multus)
		if len(spanning) > 0 {
			msg += fmt.Sprintf(" (these do: %s)", strings.Join(spanning, ", "))
		}
		return no(ReasonHotplugNotMigratable, "%s", msg)
	}
	v := Verdict{OK: true, Reason: ReasonMigratable, Method: vmletv1.LiveMigration}
	if copied {
		v.Method = vmletv1.BlockMigration
	}
	return v
}

// claimMigratable decides the claim name of a volume (what it is to the volume: "claim",
// "dataVolume", ...): a claim whose bound
// access modes (status.volumeStatus[].persistentVolumeClaimInfo, recorded in cluster mode) say
// ReadWriteMany is shared between nodes and needs no copy (local mode records its claims so:
// its nodes share the machine); a ReadWriteOnce one is not, with KubeVirt's message; one with
// no recorded modes is this node's own (an agent's --claim outside local mode, or a hot-plugged
// claim not attached yet). alsoShared are further access modes that will do (an ephemeral
// volume only reads its claim: ReadOnlyMany).
func claimMigratable(vmi *vmletv1.VirtualMachineInstance, volume, what, name string, alsoShared ...corev1.PersistentVolumeAccessMode) (Verdict, bool) {
	shared := append([]corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, alsoShared...)
	for _, s := range vmi.Status.VolumeStatus {
		if s.Name != volume || s.PersistentVolumeClaimInfo == nil {
			continue
		}
		for _, m := range s.PersistentVolumeClaimInfo.AccessModes {
			if slices.Contains(shared, m) {
				return Verdict{}, true
			}
		}
		return no(ReasonDisksNotMigratable, "cannot migrate VMI: PVC %s is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)", name), false
	}
	return no(ReasonDisksNotMigratable, "cannot migrate: %s %s is this node's own (no access modes recorded: not a ReadWriteMany claim, nor one every node shares; vmlet does not copy claims)", what, name), false
}

func no(reason, format string, args ...any) Verdict {
	return Verdict{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// secondaryNetwork names the vmi's first secondary (multus) network that is not one of
// spanning (a "namespace/" prefix of its networkName is ignored), and its networkName: the
// agent hot-plugs their interfaces, and only those of spanning networks keep their address on
// another node.
func secondaryNetwork(vmi *vmletv1.VirtualMachineInstance, spanning []string) (string, string) {
	for _, n := range vmi.Spec.Networks {
		if n.Multus == nil {
			continue
		}
		short := n.Multus.NetworkName
		if _, s, found := strings.Cut(short, "/"); found {
			short = s
		}
		if !slices.Contains(spanning, short) {
			return n.Name, n.Multus.NetworkName
		}
	}
	return "", ""
}
