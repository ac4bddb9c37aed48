package translate

import (
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/storage"
)

// NodeEnv is what the translation needs from the node: where the VMI's files live and how its
// volumes resolve. It is plain data so that the translation stays pure and table-tested.
type NodeEnv struct {
	// RunDir is the VMI's private run folder (sockets, logs); short enough for unix sockets.
	RunDir string
	// VolumeDir is the VMI's storage folder (absolute; storage.Options.VMDir): overlays, empty
	// disks, cloud-init ISOs and the kernel links. It is removed with the VMI.
	VolumeDir string
	Storage   StorageEnv
	// TCGCacheMiB bounds QEMU's TCG translation cache (RSS) when TCG is used; 0 = QEMU default.
	TCGCacheMiB int
	// Machine is the node's versioned q35 machine type (qemu.DefaultQ35Machine, e.g.
	// pc-q35-7.2), which a vmi that names no machine type gets: the guest ABI it starts with is
	// then written down (status.machine) and kept by a migration. Empty: the "q35" alias.
	Machine string
}

// Desired is everything a VMI wants on this node, translated once per reconcile pass.
type Desired struct {
	// Spec is the domain as it starts: the disks of the volumes attached at boot, the kernel
	// boot with paths as planned (Resolve replaces them with the ones Apply made), and the NICs
	// of the pod network's interface as planned (ResolveNICs replaces them with the attached
	// ones).
	Spec *qemu.Spec
	// Storage plans the volumes attached at boot and the kernel boot.
	Storage *storage.VMPlan
	// Network is what network.Attach wires in the launcher's pod network namespace: every
	// present interface, the boot one and those of secondary networks (BootNetwork is the
	// former). It is nil when the guest has no interfaces (autoattachPodInterface: false and
	// none listed): then the VMI needs no pod network. Interfaces with state: absent are in
	// none of Network, Spec.NICs and HotplugNICs: they are unplugged.
	Network *network.Spec
	// HotplugVolumes are the hotpluggable volumes, attached once the guest runs.
	HotplugVolumes []HotplugVolume
	// HotplugNICs are the interfaces of multus (secondary) networks: always plugged into the
	// running domain, also those listed at creation, so that the domain's boot spec never
	// depends on them (as hotpluggable volumes).
	HotplugNICs []HotNIC
}

// Resolve returns the spec to start with the disks and kernel that storage's Apply made (host
// paths resolved to their real paths).
func (d *Desired) Resolve(res *storage.Result) *qemu.Spec {
	s := *d.Spec
	s.Disks = res.Disks
	s.Boot = res.Boot
	return &s
}

// Default and limit values of the translation.
const (
	defaultMemory   = "128Mi"
	hotplugPorts    = 4
	maxDomainNameLn = 63
)

// Translate translates a VMI into the QEMU driver's spec, the storage plans its volumes need,
// its network and its hotplug sets (refs carries the Secrets the VMI refers to). StartPaused
// is left to the caller: spec.paused matters at creation only (afterwards it is a
// pause/unpause, not another domain). It is pure: it reads only its arguments. Problems are
// *SpecError values, found in this order: annotations, memory, firmware, volumes and disks,
// interfaces and networks, then QEMU's checks of the whole spec. Unsupported features wrap
// ErrUnsupported; vmlet never drops a requested feature silently.
func Translate(vmi *vmletv1.VirtualMachineInstance, env NodeEnv, refs Referenced) (*Desired, error) {
	if err := checkAnnotations(vmi.Annotations); err != nil {
		return nil, err
	}
	d := &vmi.Spec.Domain
	s := &qemu.Spec{
		Name:         DomainName(vmi),
		UUID:         string(vmi.UID),
		HotplugPorts: hotplugPorts,
		// Always there, so that SCSI disks can be hotplugged (the boot-time domain must not
		// depend on which hotpluggable volumes exist).
		SCSI:        true,
		TCGCacheMiB: env.TCGCacheMiB,
		Agent:       &qemu.Agent{Socket: filepath.Join(env.RunDir, "qga.sock")},
	}
	if d.Firmware != nil && d.Firmware.UUID != "" {
		s.UUID = string(d.Firmware.UUID)
	}
	mem, err := guestMemoryMiB(d)
	if err != nil {
		return nil, err
	}
	s.MemoryMiB = BootMemoryMiB(vmi, mem)
	s.MemoryHotplug = memoryHotplug(vmi, s.MemoryMiB)
	if d.CPU != nil {
		s.CPU = qemu.CPU{Model: d.CPU.Model, Sockets: int(d.CPU.Sockets), Cores: int(d.CPU.Cores), Threads: int(d.CPU.Threads)}
		cpuHotplug(vmi, &s.CPU)
	}
	if d.Machine != nil {
		s.Machine = d.Machine.Type
	} else {
		s.Machine = env.Machine
	}
	if d.Devices.Rng != nil {
		s.RNG = true
	}
	s.Balloon = memBalloon(vmi)
	if s.Panic, err = panicDevices(vmi); err != nil {
		return nil, err
	}
	s.Graphics = display(vmi, env.RunDir)
	if d.Devices.AutoattachSerialConsole == nil || *d.Devices.AutoattachSerialConsole {
		s.Serial = &qemu.Serial{
			Socket:  filepath.Join(env.RunDir, "serial.sock"),
			LogFile: filepath.Join(env.RunDir, "serial.log"),
		}
	}
	if err := firmware(d.Firmware); err != nil {
		return nil, err
	}
	plan, hot, err := storageDomain(vmi, env, refs)
	if err != nil {
		return nil, err
	}
	s.Disks, s.Boot = plan.Disks, plan.Boot
	n, err := translateNetwork(vmi)
	if err != nil {
		return nil, err
	}
	s.NICs = n.nics
	if err := s.Validate(); err != nil {
		return nil, &SpecError{Field: "spec", Reason: err.Error()}
	}
	return &Desired{Spec: s, Storage: plan, Network: n.spec, HotplugVolumes: hot, HotplugNICs: n.hot}, nil
}

// DomainName is the name the node agent gives the VMI's domain (its Sync spec's name): the VMI's
// namespace and name, which the API already restricts to DNS labels. A launcher started with
// --name must be given this one (the cluster controller's launcher pods), or it refuses the
// agent's Sync.
func DomainName(vmi *vmletv1.VirtualMachineInstance) string {
	n := vmi.Namespace + "_" + vmi.Name
	if len(n) > maxDomainNameLn {
		n = n[:maxDomainNameLn]
	}
	return strings.Trim(n, "_-.")
}

func guestMemoryMiB(d *vmletv1.DomainSpec) (int, error) {
	var q resource.Quantity
	switch {
	case d.Memory != nil && d.Memory.Guest != nil:
		q = *d.Memory.Guest
	case hasQuantity(d.Resources.Requests, vmletv1.ResourceMemory):
		q = d.Resources.Requests[vmletv1.ResourceMemory]
	case hasQuantity(d.Resources.Limits, vmletv1.ResourceMemory):
		q = d.Resources.Limits[vmletv1.ResourceMemory]
	default:
		q = resource.MustParse(defaultMemory)
	}
	b := q.Value()
	if b < 1<<20 {
		return 0, &SpecError{Field: "spec.domain.memory.guest", Reason: fmt.Sprintf("%s is not a usable guest memory size", q.String())}
	}
	return int((b + 1<<20 - 1) >> 20), nil
}

func hasQuantity(l vmletv1.ResourceList, n vmletv1.ResourceName) bool {
	q, ok := l[n]
	return ok && !q.IsZero()
}

// firmware rejects what the domain cannot do; the kernel boot is storage's (an image to pull).
func firmware(fw *vmletv1.Firmware) error {
	if fw == nil {
		return nil
	}
	if fw.Bootloader != nil && fw.Bootloader.EFI != nil {
		return &SpecError{Field: "spec.domain.firmware.bootloader.efi", Reason: "EFI firmware is not supported yet (BIOS and kernelBoot are)", Err: ErrUnsupported}
	}
	if fw.Serial != "" {
		return &SpecError{Field: "spec.domain.firmware.serial", Reason: "SMBIOS serial is not supported yet", Err: ErrUnsupported}
	}
	return nil
}
