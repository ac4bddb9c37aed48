package translate

import (
	"fmt"
	"slices"
	"strings"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu"
)

// MigrationTarget returns the spec a migration target starts with: spec (this node's own
// translation of the vmi, with this node's paths and taps) placed as the source runs it — the
// source's machine type and CPU model, its number of free root ports, and every disk and NIC
// on the port it has there — waiting for the incoming stream. The target must have exactly
// the source's devices: one missing on either side is an error that names it (QEMU would
// refuse the stream, or the guest would lose a device).
func MigrationTarget(spec *qemu.Spec, l *vmletv1.MigrationDomainLayout) (*qemu.Spec, error) {
	if l == nil {
		return nil, fmt.Errorf("migration target: no source layout")
	}
	s := *spec
	s.Disks, s.NICs = slices.Clone(spec.Disks), slices.Clone(spec.NICs)
	ports := map[string]int32{}
	for _, d := range l.Devices {
		ports[d.Kind+"/"+d.ID] = d.Port
	}
	take := func(kind, id string) (int, error) {
		p, ok := ports[kind+"/"+id]
		if !ok {
			return 0, fmt.Errorf("migration target: %s %s is not on the source (unplugged there, or in the spec and not plugged there yet)", kind, id)
		}
		delete(ports, kind+"/"+id)
		return int(p), nil
	}
	for i := range s.Disks {
		p, err := take("disk", s.Disks[i].ID)
		if err != nil {
			return nil, err
		}
		s.Disks[i].Port = p
	}
	for i := range s.NICs {
		p, err := take("nic", s.NICs[i].ID)
		if err != nil {
			return nil, err
		}
		s.NICs[i].Port = p
	}
	if len(ports) > 0 {
		left := make([]string, 0, len(ports))
		for k := range ports {
			left = append(left, k)
		}
		slices.Sort(left)
		return nil, fmt.Errorf("migration target: the source has %v, which this node's translation lacks (left the spec while the source still has it, or cannot be had here)", left)
	}
	if l.Machine == "" || l.CPUModel == "" {
		return nil, fmt.Errorf("migration target: the source layout names no machine type or CPU model")
	}
	s.Machine, s.CPU.Model = l.Machine, l.CPUModel
	s.HotplugPorts = int(l.HotplugPorts)
	s.SCSI = l.SCSI || s.SCSI
	s.CPU.PluggedSockets = int(l.PluggedSockets)
	if s.MemoryHotplug != nil {
		h := *s.MemoryHotplug
		h.RequestedMiB = int(l.MemoryRequestedMiB)
		s.MemoryHotplug = &h
	}
	switch {
	case l.Display == nil || !*l.Display:
		// The source runs without a display (one started before displays existed, or with
		// autoattachGraphicsDevice false): so does the target, or QEMU refuses the stream.
		s.Graphics = nil
	case s.Graphics == nil:
		return nil, fmt.Errorf("migration target: the source has a display, which this node's translation lacks")
	}
	s.Incoming, s.StartPaused = true, false
	return &s, nil
}

// CopiedDisk is a node-local disk a migration copies to the target (a block mirror).
type CopiedDisk struct {
	ID string
	// Shallow copies only the top image: a containerDisk's overlay, whose backing image the
	// target pulls itself (the same image), or an ephemeral volume's, whose claim the target
	// opens itself (a shared one).
	Shallow bool
	// Bytes is the most the copy can carry (an emptyDisk's capacity); 0 when not known
	// beforehand (an overlay holds what the guest wrote).
	Bytes int64
}

// CopiedDisks are the disks of plan a migration must copy: the writable node-local ones
// (containerDisk and ephemeral overlays, shallow; emptyDisks, whole). Read-only media (cloud-init ISOs) are
// rebuilt by the target's own storage plan, shared hostDisks opened there as they are (vmis
// with other disks do not migrate: migration.Migratable). Pure.
func CopiedDisks(vmi *vmletv1.VirtualMachineInstance, disks []qemu.Disk, diskVolumes map[string]string) []CopiedDisk {
	sources := map[string]vmletv1.VolumeSource{}
	for _, v := range vmi.Spec.Volumes {
		sources[v.Name] = v.VolumeSource
	}
	var out []CopiedDisk
	for _, d := range disks {
		if d.ReadOnly {
			continue
		}
		src, ok := sources[diskVolumes[d.ID]]
		switch {
		case !ok:
		case src.ContainerDisk != nil, src.Ephemeral != nil:
			out = append(out, CopiedDisk{ID: d.ID, Shallow: true})
		case src.EmptyDisk != nil:
			out = append(out, CopiedDisk{ID: d.ID, Bytes: src.EmptyDisk.Capacity.Value()})
		}
	}
	return out
}

// QEMUBuild is a QEMU binary and how it runs guests, as a launcher reports them.
type QEMUBuild struct {
	Accel   string // "kvm", "tcg"
	Version string // QEMU's version string ("10.0.2 (Debian 1:10.0.2+ds-2...)")
}

// release is the version's first word ("10.0.2"): a distribution's package suffix does not
// change what QEMU builds.
func (b QEMUBuild) release() string {
	f := strings.Fields(b.Version)
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// CheckTargetCPU says whether a target whose QEMU is dst can run the guest CPU the source's
// QEMU src gave the model (the layout's CPU model): the accelerator must be the same (each
// filters CPU features differently: the guest would see its CPU change under it), and a model
// that means "what this QEMU can do" (max, host) needs the same QEMU release too. An
// unknown side (empty) is not checked. Pure.
func CheckTargetCPU(model string, src, dst QEMUBuild) error {
	if src.Accel == "" || dst.Accel == "" {
		return nil
	}
	if src.Accel != dst.Accel {
		return fmt.Errorf("migration target: the guest's CPU (model %s) runs under %s on the source, and this node's QEMU runs guests under %s: the guest would see its CPU change", model, src.Accel, dst.Accel)
	}
	switch model {
	case "max", "host":
		if a, b := src.release(), dst.release(); a != "" && b != "" && a != b {
			return fmt.Errorf("migration target: the guest's CPU model %s is whatever the source's QEMU %s offers under %s; this node's QEMU is %s, whose %s differs", model, a, src.Accel, b, model)
		}
	}
	return nil
}
