package controllers

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu"
)

// ErrUnsupported marks a VMI that asks for something vmlet cannot do (yet). The reconciler
// reports it as Synchronized=False with reason Unsupported and fails the VMI without starting
// anything.
var ErrUnsupported = errors.New("unsupported")

// SpecError is a problem with one field of a VMI spec found while translating it.
type SpecError struct {
	Field  string // JSON path, e.g. "spec.volumes[0].containerDisk"
	Reason string
	Err    error // ErrUnsupported, or nil for an invalid value
}

func (e *SpecError) Error() string { return e.Field + ": " + e.Reason }
func (e *SpecError) Unwrap() error { return e.Err }

// Images resolves image references of a VMI to files on this node.
type Images interface {
	// KernelBoot returns host paths of the kernel and initrd that the image carries at the
	// given paths inside it. initrd is empty when initrdPath is.
	KernelBoot(image, kernelPath, initrdPath string) (kernel, initrd string, err error)
}

// NodeEnv is what the translation needs from the node: where the VMI's files live and how
// images resolve. It is plain data so that the translation stays pure and table-tested.
type NodeEnv struct {
	// RunDir is the VMI's private run folder (sockets, logs); short enough for unix sockets.
	RunDir string
	Images Images
	// TCGCacheMiB bounds QEMU's TCG translation cache (RSS) when TCG is used; 0 = QEMU default.
	TCGCacheMiB int
}

// Default and limit values of the translation.
const (
	defaultMemory   = "128Mi"
	hotplugPorts    = 4
	maxDomainNameLn = 63
)

// DomainSpec translates a VMI into the QEMU driver's spec. StartPaused is left to the caller:
// spec.paused matters at creation only (afterwards it is a pause/unpause, not another domain). It is pure: it reads only its
// arguments. Unsupported features yield a *SpecError wrapping ErrUnsupported; vmlet never drops
// a requested feature silently.
func DomainSpec(vmi *vmletv1.VirtualMachineInstance, env NodeEnv) (*qemu.Spec, error) {
	d := &vmi.Spec.Domain
	s := &qemu.Spec{
		Name:         domainName(vmi),
		UUID:         string(vmi.UID),
		HotplugPorts: hotplugPorts,
		TCGCacheMiB:  env.TCGCacheMiB,
		Agent:        &qemu.Agent{Socket: filepath.Join(env.RunDir, "qga.sock")},
	}
	if d.Firmware != nil && d.Firmware.UUID != "" {
		s.UUID = string(d.Firmware.UUID)
	}
	mem, err := guestMemoryMiB(d)
	if err != nil {
		return nil, err
	}
	s.MemoryMiB = mem
	if d.CPU != nil {
		s.CPU = qemu.CPU{Model: d.CPU.Model, Sockets: int(d.CPU.Sockets), Cores: int(d.CPU.Cores), Threads: int(d.CPU.Threads)}
	}
	if d.Machine != nil {
		s.Machine = d.Machine.Type
	}
	if d.Devices.Rng != nil {
		s.RNG = true
	}
	if d.Devices.AutoattachSerialConsole == nil || *d.Devices.AutoattachSerialConsole {
		s.Serial = &qemu.Serial{
			Socket:  filepath.Join(env.RunDir, "serial.sock"),
			LogFile: filepath.Join(env.RunDir, "serial.log"),
		}
	}
	if err := firmware(d.Firmware, env, s); err != nil {
		return nil, err
	}
	if err := disks(vmi, s); err != nil {
		return nil, err
	}
	if s.NICs, err = interfaces(vmi); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, &SpecError{Field: "spec", Reason: err.Error()}
	}
	return s, nil
}

// domainName is the VMI's namespace and name, which the API already restricts to DNS labels.
func domainName(vmi *vmletv1.VirtualMachineInstance) string {
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

func firmware(fw *vmletv1.Firmware, env NodeEnv, s *qemu.Spec) error {
	if fw == nil {
		return nil
	}
	if fw.Bootloader != nil && fw.Bootloader.EFI != nil {
		return &SpecError{Field: "spec.domain.firmware.bootloader.efi", Reason: "EFI firmware is not supported yet (BIOS and kernelBoot are)", Err: ErrUnsupported}
	}
	if fw.Serial != "" {
		return &SpecError{Field: "spec.domain.firmware.serial", Reason: "SMBIOS serial is not supported yet", Err: ErrUnsupported}
	}
	kb := fw.KernelBoot
	if kb == nil {
		return nil
	}
	if kb.Container == nil {
		return &SpecError{Field: "spec.domain.firmware.kernelBoot.container", Reason: "kernelBoot needs a container with the kernel"}
	}
	if env.Images == nil {
		return &SpecError{Field: "spec.domain.firmware.kernelBoot.container.image", Reason: "no image source configured on this node", Err: ErrUnsupported}
	}
	kernel, initrd, err := env.Images.KernelBoot(kb.Container.Image, kb.Container.KernelPath, kb.Container.InitrdPath)
	if err != nil {
		return &SpecError{Field: "spec.domain.firmware.kernelBoot.container.image", Reason: err.Error(), Err: err}
	}
	s.Boot = qemu.Boot{Kernel: kernel, Initrd: initrd, Cmdline: kb.KernelArgs}
	return nil
}

// disks translates volumes+disks. Volume sources arrive with the storage work; until then every
// volume is reported as unsupported rather than dropped.
func disks(vmi *vmletv1.VirtualMachineInstance, s *qemu.Spec) error {
	for i, v := range vmi.Spec.Volumes {
		return &SpecError{
			Field:  fmt.Sprintf("spec.volumes[%d]", i),
			Reason: fmt.Sprintf("volume %q: volume sources are not supported by this vmlet build yet (boot with firmware.kernelBoot)", v.Name),
			Err:    ErrUnsupported,
		}
	}
	return nil
}
