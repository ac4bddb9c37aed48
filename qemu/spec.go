package qemu

import "os"

// Spec describes one virtual machine (a "domain" in libvirt terms) in plain Go types. It is
// the only input Start needs; BuildArgv turns the host-independent part of it into QEMU's
// command line and the devices are added over QMP.
//
// Identifiers (Name, disk and NIC IDs) are restricted alphabets (see Validate) so that they can
// never inject a QEMU option. Paths are free-form as long as they are absolute and contain no
// control characters: disk paths only ever travel inside QMP JSON, socket paths are bound by
// vmlet and handed to QEMU as file descriptors, and kernel/initrd paths that are not plain are
// opened by vmlet and passed as /dev/fd/N.
type Spec struct {
	// Name is the VM name shown in the process title: 1–253 characters, a letter or digit
	// followed by letters, digits, '.', '_' or '-'.
	Name string
	// UUID is the SMBIOS system UUID in canonical 8-4-4-4-12 hex form; empty lets QEMU choose.
	UUID string
	// Machine is the q35 machine type: "q35" or a versioned "pc-q35-X.Y". Empty means "q35",
	// or the emulator's versioned q35 type when Migratable.
	Machine string
	// Accel chooses the accelerator; AccelAuto uses KVM only when accel.Probe says it is usable.
	Accel AccelMode
	// TCGCacheMiB sets -accel tcg,tb-size (MiB of translation cache); 0 keeps QEMU's default.
	// Small values cut QEMU's RSS for dense TCG hosts. Ignored under KVM.
	TCGCacheMiB int
	CPU         CPU
	// MemoryMiB is guest RAM in MiB.
	MemoryMiB int
	Boot      Boot
	// Disks are attached in order before the guest starts (cold plug) over QMP.
	Disks []Disk
	// NICs are attached in order after the disks, over QMP.
	NICs []NIC
	// Serial is the first serial port (ttyS0); nil means none.
	Serial *Serial
	// Agent is the qemu-guest-agent virtio-serial channel; nil means none.
	Agent *Agent
	// RNG adds a virtio-rng-pci device fed from the host's /dev/urandom.
	RNG bool
	// Balloon adds a virtio-balloon-pci memory balloon; nil means none.
	Balloon *Balloon
	// MemoryHotplug adds a virtio-mem device so that memory can grow past MemoryMiB (the boot
	// memory) at run time (SetMemory); nil means none.
	MemoryHotplug *MemoryHotplug
	// Graphics adds a display (VGA) and a VNC server on a unix socket; nil means none.
	Graphics *Graphics
	// Panic lists the guest's panic devices, each model at most once (panic.go). With any, a
	// guest panic makes QEMU exit (ExitGuestPanic); without, the guest cannot tell QEMU.
	Panic []PanicModel
	// SCSI adds the virtio-scsi controller even when no disk uses the SCSI bus, so that SCSI
	// disks can be hotplugged later. It is implied by any SCSI disk in Disks.
	SCSI bool
	// HotplugPorts is the number of PCIe root ports left free for hotplug, on top of one root
	// port per virtio disk and NIC in the spec.
	HotplugPorts int
	// Migratable asks for a migration-safe guest ABI: a named CPU model (DefaultMigratableCPU
	// when CPU.Model is empty) and a versioned machine type.
	Migratable bool
	// Incoming starts QEMU with -incoming defer: a migration target that waits for
	// MigrateIncoming. The spec must describe the same devices (ids, ports) as the source;
	// (*VM).MigrationSpec returns such a spec.
	Incoming bool
	// StartPaused leaves the guest paused after Start (status "prelaunch") instead of sending
	// cont. Migration targets never get cont from Start.
	StartPaused bool
}

// AccelMode selects the accelerator.
type AccelMode string

// Accelerator choices.
const (
	AccelAuto AccelMode = "" // KVM when usable (accel.Probe), else TCG
	AccelKVM  AccelMode = "kvm"
	AccelTCG  AccelMode = "tcg"
)

// CPU is the virtual CPU model and topology. Zero counts mean 1.
type CPU struct {
	// Model is a QEMU CPU model ("qemu64", "Skylake-Client-v4", "host", "max"). Empty means
	// "host" under KVM or "max" under TCG, or DefaultMigratableCPU when the spec is Migratable.
	Model   string
	Sockets int // present at boot
	Cores   int
	Threads int
	// MaxSockets enables CPU hotplug of whole sockets up to MaxSockets (-smp maxcpus); 0 means
	// no hotplug. See cpuhotplug.go.
	MaxSockets int
	// PluggedSockets are sockets beyond Sockets that exist at start as -device CPUs with the
	// ids SetCPUs gives them: a migration target re-creating the source's hot-plugged CPUs.
	PluggedSockets int
}

// VCPUs is the total number of virtual CPUs.
func (c CPU) VCPUs() int { return max(c.Sockets, 1) * max(c.Cores, 1) * max(c.Threads, 1) }

// DefaultMigratableCPU is the CPU model used for Migratable specs that name none: a baseline
// every x86-64 host (and TCG) can provide.
const DefaultMigratableCPU = "qemu64"

// Boot selects direct kernel boot; an empty Kernel boots the default firmware (SeaBIOS) from
// the devices' boot order (their BootIndex).
type Boot struct {
	Kernel  string // absolute path of a bzImage
	Initrd  string // absolute path, optional
	Cmdline string // kernel command line, optional; printable characters only
}

// DiskFormat is the image format of a disk.
type DiskFormat string

// Disk formats.
const (
	FormatRaw   DiskFormat = "raw"
	FormatQCOW2 DiskFormat = "qcow2"
)

// DiskBus is the bus a disk is attached to.
type DiskBus string

// Disk buses. Virtio disks sit on their own PCIe root port and can be hotplugged; SCSI disks
// sit on the virtio-scsi controller and can be hotplugged; SATA (AHCI) has no hotplug in QEMU,
// so SATA disks are cold-plugged on the command line (as JSON, still free of comma hazards).
const (
	BusVirtio DiskBus = "virtio"
	BusSATA   DiskBus = "sata"
	BusSCSI   DiskBus = "scsi"
)

// CacheMode is the host page cache policy of a disk, with libvirt's names.
type CacheMode string

// Cache modes.
const (
	CacheNone         CacheMode = "none"         // O_DIRECT, guest write cache on
	CacheWriteback    CacheMode = "writeback"    // host page cache, guest write cache on
	CacheWritethrough CacheMode = "writethrough" // host page cache, guest write cache off
	CacheDirectSync   CacheMode = "directsync"   // O_DIRECT, guest write cache off
	CacheUnsafe       CacheMode = "unsafe"       // host page cache, flushes ignored
)

// AIOMode is the I/O backend of a disk.
type AIOMode string

// AIO modes. AIONative needs CacheNone or CacheDirectSync.
const (
	AIOThreads AIOMode = "threads"
	AIONative  AIOMode = "native"
	AIOIOURing AIOMode = "io_uring"
)

// Disk is a block device. Empty Format, Bus, Cache and AIO mean raw, virtio, writeback and
// threads.
type Disk struct {
	ID       string // see Validate: [a-z][a-z0-9-]{0,27}
	Path     string // absolute path of an image file or block device
	Format   DiskFormat
	ReadOnly bool
	Bus      DiskBus
	CDROM    bool   // a CD-ROM (SATA or SCSI only); implies ReadOnly
	Serial   string // guest-visible serial, up to 20 of [A-Za-z0-9._-]
	// BootIndex is the device's place in the firmware's boot order (QEMU's bootindex; 1 is
	// tried first); 0 means none. The guest boots strictly (-boot strict=on): the firmware
	// tries only devices with a BootIndex, and the kernel of Boot before all of them.
	BootIndex int
	Cache     CacheMode
	AIO       AIOMode
	// Port is the PCIe root port (1-based) of a virtio disk; 0 picks the first free one.
	// Migration targets pin it (MigrationSpec does).
	Port int
	// Files are open files of the image, for an image QEMU cannot open by Path (a volume
	// mounted on the host after the launcher's container was made): an O_RDWR one for a
	// writable disk (and optionally an O_RDONLY one), an O_RDONLY one for a read-only disk;
	// each a regular file or a block device, at most MaxDiskFiles. They go to QEMU with add-fd
	// into one fdset per disk and the file node opens /dev/fdset/N (diskfiles.go); Path stays
	// required and names the image in logs. Virtio and SCSI disks only. The caller keeps
	// ownership and may close them once Start or AddDisk returned. Their status flags are
	// shared with QEMU's copies and get the cache mode's O_DIRECT (QEMU matches it too), so
	// do no I/O through them.
	Files []*os.File
}

// NIC is a virtio network interface backed by a host tap device.
type NIC struct {
	ID  string // see Validate: [a-z][a-z0-9-]{0,27}
	MAC string // unicast, "52:54:00:12:34:56"
	// TapFDs are open tap queue files, one per queue (a multiqueue tap has several). They are
	// passed to QEMU with getfd over SCM_RIGHTS; the caller keeps ownership and may close them
	// once Start or AddNIC returned.
	TapFDs []*os.File
	// TapName makes QEMU open /dev/net/tun itself for an existing tap (needs CAP_NET_ADMIN in
	// QEMU). Exactly one of TapFDs and TapName is set.
	TapName string
	// Queues is the number of queue pairs with TapName; with TapFDs it must be 0 or
	// len(TapFDs).
	Queues int
	// Model is the device model; only "virtio" (the default) exists.
	Model string
	// Port is the PCIe root port (1-based); 0 picks the first free one.
	Port int
	// BootIndex is the NIC's place in the firmware's boot order (network boot through the
	// NIC's option ROM); 0 means none. See Disk.BootIndex.
	BootIndex int
}

// Serial is the guest's first serial port, served by QEMU on a unix socket that vmlet binds
// (one client at a time) and optionally copied to a log file.
type Serial struct {
	Socket  string // absolute path, shorter than 108 bytes; created by Start
	LogFile string // optional absolute path; opened for append by Start
}

// Agent is the qemu-guest-agent channel (virtserialport org.qemu.guest_agent.0) served by QEMU
// on a unix socket that vmlet binds.
type Agent struct {
	Socket string // absolute path, shorter than 108 bytes; created by Start
}

// Balloon is the virtio memory balloon (libvirt's <memballoon model='virtio'>). It sits at a
// fixed address on pcie.0 (no root port), so it changes neither the hotplug ports nor the
// migration layout; source and target must both have it or both not.
type Balloon struct {
	// StatsPeriodSeconds is the guest-stats-polling-interval: how often QEMU asks the guest
	// driver for memory statistics (libvirt's <stats period>). 0 asks for none.
	StatsPeriodSeconds int
	// FreePageReporting lets the guest report freed pages so the host can reclaim them
	// (free-page-reporting=on).
	FreePageReporting bool
}

// Graphics is the guest's display: a VGA device (QEMU's "std" VGA, as libvirt gives a q35
// guest for KubeVirt's default graphics device) at a fixed pcie.0 address, so it changes
// neither the hotplug ports nor the migration layout (source and target must both have it or
// both not), and a VNC server without a network listener (-vnc none). vmlet binds Socket and
// hands every client it accepts to QEMU's VNC server (getfd + add_client).
type Graphics struct {
	Socket string // absolute path, shorter than 108 bytes; created by Start
}

// AgentPortName is the virtio-serial port name qemu-ga looks for.
const AgentPortName = "org.qemu.guest_agent.0"
