package testguest

// Console markers printed by the guest's /init (test/assets/guest/init), one per line.
const (
	// MarkerReady: qemu-ga serves its virtio-serial port and acpid listens to the power button.
	MarkerReady = "VMLET-GUEST-READY"
	// MarkerDiskAdded is followed by " <name>" (e.g. "vdb") for a block device added after boot.
	MarkerDiskAdded = "VMLET-DISK-ADDED"
	// MarkerDiskRemoved is followed by " <name>" for a block device removed after boot.
	MarkerDiskRemoved = "VMLET-DISK-REMOVED"
	// MarkerNICAdded is followed by " <name>" (e.g. "eth1") for an interface added after boot.
	MarkerNICAdded = "VMLET-NIC-ADDED"
	// MarkerNICRemoved is followed by " <name>" for an interface removed after boot.
	MarkerNICRemoved = "VMLET-NIC-REMOVED"
	// MarkerCPUAdded is followed by " <name>" (e.g. "cpu1") for a vCPU hot-plugged after boot;
	// init onlines it right after printing this.
	MarkerCPUAdded = "VMLET-CPU-ADDED"
	// MarkerCPURemoved is followed by " <name>" for a vCPU the guest ejected.
	MarkerCPURemoved = "VMLET-CPU-REMOVED"
	// MarkerIP is followed by " <iface> <addr>" once udhcpc configured a lease on an eth* NIC.
	MarkerIP = "VMLET-IP"
	// MarkerIP6 is followed by " <iface> <addr>" once the guest's DHCPv6 client configured its
	// leased address on an eth* NIC (and the address passed duplicate address detection). It
	// is printed again after every renewal. Note that MarkerIP is a prefix of it: wait for
	// MarkerIP+" " to mean IPv4.
	MarkerIP6 = "VMLET-IP6"
	// MarkerPoweroff: the guest got the ACPI power button and powers off.
	MarkerPoweroff = "VMLET-POWEROFF"
	// MarkerPowerdownIgnored: the guest got the ACPI power button and ignores it (CmdlineNoACPI).
	MarkerPowerdownIgnored = "VMLET-POWERDOWN-IGNORED"
)

// DataDiskLabel is the text at offset 0 of the data disk (Assets.DataDisk), so a guest can prove
// it reads that very disk: `head -c 15 /dev/vda`.
const DataDiskLabel = "VMLET-DATA-DISK"

// CmdlineNoACPI makes the guest ignore ACPI powerdown when appended to the kernel cmdline (it still
// prints MarkerPowerdownIgnored): used to test forced shutdown.
const CmdlineNoACPI = "vmlet.noacpi"

// BaseCmdline is the kernel command line for the test guest: serial console on ttyS0, kernel
// quiet so markers stand out, and an immediate reboot on panic.
const BaseCmdline = "console=ttyS0 quiet panic=-1"
