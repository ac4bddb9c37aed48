package launcher

import (
	"fmt"

	"github.com/vmlet/vmlet/qemu"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// Spec conversion between the wire (pb.DomainSpec) and the driver (qemu.Spec). Both
// directions are pure. What only one side has:
//   - the wire names the serial console, guest agent and display with a bool: the launcher's
//     own socket and log paths (Paths) fill in qemu.Serial, qemu.Agent and qemu.Graphics;
//   - a wire NIC names its tap with the network namespace it lives in (NIC.netns): qemu.NIC
//     has no such field, so the namespaces travel beside the spec in a NetNS map;
//   - qemu.NIC.TapFDs (open files) never travel; the launcher opens them (see openTap) or
//     takes the ones the agent handed over (HandOverTap);
//   - qemu.Disk.Files never travel either: the agent hands them over (HandOverDisk).

// NetNS maps a NIC id to the network namespace path its tap lives in ("" = the launcher's).
type NetNS map[string]string

// SpecFromProto converts a wire spec into a driver spec for a launcher with run dir paths.
// It checks only what the conversion needs (nil spec, integer ranges); qemu.Spec.Validate
// does the rest when the domain starts.
func SpecFromProto(p *pb.DomainSpec, paths Paths) (*qemu.Spec, NetNS, error) {
	if p == nil {
		return nil, nil, fmt.Errorf("convert spec: %w: spec missing", ErrInvalidSpec)
	}
	s := &qemu.Spec{
		Name:         p.GetName(),
		UUID:         p.GetUuid(),
		Machine:      p.GetMachine(),
		Accel:        qemu.AccelMode(p.GetAccel()),
		TCGCacheMiB:  int(p.GetTcgCacheMib()),
		MemoryMiB:    int(p.GetMemoryMib()),
		RNG:          p.GetRng(),
		SCSI:         p.GetScsi(),
		HotplugPorts: int(p.GetHotplugPorts()),
		Migratable:   p.GetMigratable(),
		StartPaused:  p.GetStartPaused(),
	}
	if c := p.GetCpu(); c != nil {
		s.CPU = qemu.CPU{Model: c.GetModel(), Sockets: int(c.GetSockets()), Cores: int(c.GetCores()), Threads: int(c.GetThreads()),
			MaxSockets: int(c.GetMaxSockets()), PluggedSockets: int(c.GetPluggedSockets())}
	}
	if m := p.GetMemoryHotplug(); m != nil {
		s.MemoryHotplug = &qemu.MemoryHotplug{MaxMiB: int(m.GetMaxMib()), RequestedMiB: int(m.GetRequestedMib()), BlockMiB: int(m.GetBlockMib())}
	}
	if b := p.GetBoot(); b != nil {
		s.Boot = qemu.Boot{Kernel: b.GetKernel(), Initrd: b.GetInitrd(), Cmdline: b.GetCmdline()}
	}
	for _, d := range p.GetDisks() {
		s.Disks = append(s.Disks, DiskFromProto(d))
	}
	ns := NetNS{}
	for _, n := range p.GetNics() {
		s.NICs = append(s.NICs, NICFromProto(n))
		if n.GetNetns() != "" {
			ns[n.GetId()] = n.GetNetns()
		}
	}
	if p.GetSerial() {
		s.Serial = &qemu.Serial{Socket: paths.ConsoleSocket(), LogFile: paths.SerialLog()}
	}
	if p.GetAgent() {
		s.Agent = &qemu.Agent{Socket: paths.AgentSocket()}
	}
	if p.GetGraphics() {
		s.Graphics = &qemu.Graphics{Socket: paths.VNCSocket()}
	}
	for _, m := range p.GetPanic() {
		s.Panic = append(s.Panic, qemu.PanicModel(m))
	}
	if b := p.GetBalloon(); b != nil {
		s.Balloon = &qemu.Balloon{StatsPeriodSeconds: int(b.GetStatsPeriodSeconds()), FreePageReporting: b.GetFreePageReporting()}
	}
	return s, ns, nil
}

// SpecToProto converts a driver spec (e.g. (*qemu.VM).MigrationSpec) into a wire spec; ns
// gives the NICs' namespaces. Incoming is not on the wire (PrepareMigrationTarget implies it);
// socket paths are not either (each launcher uses its own).
func SpecToProto(s *qemu.Spec, ns NetNS) *pb.DomainSpec {
	p := &pb.DomainSpec{
		Name:         s.Name,
		Uuid:         s.UUID,
		Machine:      s.Machine,
		Accel:        string(s.Accel),
		TcgCacheMib:  int32(s.TCGCacheMiB),
		MemoryMib:    int32(s.MemoryMiB),
		Serial:       s.Serial != nil,
		Agent:        s.Agent != nil,
		Graphics:     s.Graphics != nil,
		Rng:          s.RNG,
		Scsi:         s.SCSI,
		HotplugPorts: int32(s.HotplugPorts),
		Migratable:   s.Migratable,
		StartPaused:  s.StartPaused,
	}
	if s.CPU != (qemu.CPU{}) {
		c := s.CPU
		p.Cpu = &pb.CPU{Model: c.Model, Sockets: int32(c.Sockets), Cores: int32(c.Cores), Threads: int32(c.Threads),
			MaxSockets: int32(c.MaxSockets), PluggedSockets: int32(c.PluggedSockets)}
	}
	if m := s.MemoryHotplug; m != nil {
		p.MemoryHotplug = &pb.MemoryHotplug{MaxMib: int32(m.MaxMiB), RequestedMib: int32(m.RequestedMiB), BlockMib: int32(m.BlockMiB)}
	}
	if s.Boot != (qemu.Boot{}) {
		p.Boot = &pb.Boot{Kernel: s.Boot.Kernel, Initrd: s.Boot.Initrd, Cmdline: s.Boot.Cmdline}
	}
	for _, m := range s.Panic {
		p.Panic = append(p.Panic, string(m))
	}
	if b := s.Balloon; b != nil {
		p.Balloon = &pb.Balloon{StatsPeriodSeconds: int32(b.StatsPeriodSeconds), FreePageReporting: b.FreePageReporting}
	}
	for _, d := range s.Disks {
		p.Disks = append(p.Disks, DiskToProto(d))
	}
	for _, n := range s.NICs {
		p.Nics = append(p.Nics, NICToProto(n, ns[n.ID]))
	}
	return p
}

// DiskFromProto converts a wire disk (nil gives the zero disk, which fails validation).
func DiskFromProto(d *pb.Disk) qemu.Disk {
	return qemu.Disk{
		ID:        d.GetId(),
		Path:      d.GetPath(),
		Format:    qemu.DiskFormat(d.GetFormat()),
		ReadOnly:  d.GetReadOnly(),
		Bus:       qemu.DiskBus(d.GetBus()),
		CDROM:     d.GetCdrom(),
		Serial:    d.GetSerial(),
		BootIndex: int(d.GetBootIndex()),
		Cache:     qemu.CacheMode(d.GetCache()),
		AIO:       qemu.AIOMode(d.GetAio()),
		Port:      int(d.GetPort()),
	}
}

// DiskToProto converts a driver disk.
func DiskToProto(d qemu.Disk) *pb.Disk {
	return &pb.Disk{
		Id:        d.ID,
		Path:      d.Path,
		Format:    string(d.Format),
		ReadOnly:  d.ReadOnly,
		Bus:       string(d.Bus),
		Cdrom:     d.CDROM,
		Serial:    d.Serial,
		BootIndex: int32(d.BootIndex),
		Cache:     string(d.Cache),
		Aio:       string(d.AIO),
		Port:      int32(d.Port),
	}
}

// NICFromProto converts a wire NIC; its netns is n.GetNetns(), not part of qemu.NIC.
func NICFromProto(n *pb.NIC) qemu.NIC {
	return qemu.NIC{
		ID:        n.GetId(),
		MAC:       n.GetMac(),
		TapName:   n.GetTapName(),
		Queues:    int(n.GetQueues()),
		Model:     n.GetModel(),
		Port:      int(n.GetPort()),
		BootIndex: int(n.GetBootIndex()),
	}
}

// NICToProto converts a driver NIC whose tap lives in netns. TapFDs do not travel.
func NICToProto(n qemu.NIC, netns string) *pb.NIC {
	return &pb.NIC{
		Id:        n.ID,
		Mac:       n.MAC,
		TapName:   n.TapName,
		Netns:     netns,
		Queues:    int32(n.Queues),
		Model:     n.Model,
		Port:      int32(n.Port),
		BootIndex: int32(n.BootIndex),
	}
}
