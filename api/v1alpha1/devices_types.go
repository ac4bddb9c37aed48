package v1alpha1

// Devices lists the virtual devices of the guest.
//
// +kubebuilder:validation:XValidation:rule="!has(self.disks) || self.disks.all(d, !has(d.bootOrder) || self.disks.filter(e, has(e.bootOrder) && e.bootOrder == d.bootOrder).size() == 1)",message="every bootOrder must be unique across disks and interfaces",fieldPath=".disks"
// +kubebuilder:validation:XValidation:rule="!has(self.interfaces) || self.interfaces.all(i, !has(i.bootOrder) || self.interfaces.filter(j, has(j.bootOrder) && j.bootOrder == i.bootOrder).size() == 1)",message="every bootOrder must be unique across disks and interfaces",fieldPath=".interfaces"
// +kubebuilder:validation:XValidation:rule="!has(self.disks) || !has(self.interfaces) || !self.disks.exists(d, has(d.bootOrder) && self.interfaces.exists(i, has(i.bootOrder) && i.bootOrder == d.bootOrder))",message="every bootOrder must be unique across disks and interfaces",fieldPath=".interfaces"
type Devices struct {
	// Disks describes disks, cdroms and luns which are connected to the vmi.
	// Disk names are unique and each names a volume in spec.volumes.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Disks []Disk `json:"disks,omitempty"`
	// Interfaces describe network interfaces which are added to the vmi.
	// Interface names are unique and each names a network in spec.networks.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Interfaces []Interface `json:"interfaces,omitempty"`
	// Whether to attach a pod network interface. Defaults to true.
	// +optional
	AutoattachPodInterface *bool `json:"autoattachPodInterface,omitempty"`
	// Whether to attach the default graphics device or not.
	// VNC will not be available if set to false. Defaults to true.
	// +optional
	AutoattachGraphicsDevice *bool `json:"autoattachGraphicsDevice,omitempty"`
	// Whether to attach the default serial console or not.
	// Serial console access will not be available if set to false. Defaults to true.
	// +optional
	AutoattachSerialConsole *bool `json:"autoattachSerialConsole,omitempty"`
	// Whether to attach a memory balloon device (virtio-balloon-pci with guest memory
	// statistics every 10 s and free page reporting) or not. Defaults to true.
	// +optional
	AutoattachMemBalloon *bool `json:"autoattachMemBalloon,omitempty"`
	// Whether to have a random number generator from host (virtio-rng-pci).
	// +optional
	Rng *Rng `json:"rng,omitempty"`
	// If specified, virtual network interfaces configured with a virtio bus will also enable the
	// vhost multiqueue feature for network devices. The number of queues created depends on
	// additional factors of the VirtualMachineInstance, like the number of guest CPUs.
	// +optional
	NetworkInterfaceMultiQueue *bool `json:"networkInterfaceMultiqueue,omitempty"`
	// PanicDevices provides additional crash information when a guest crashes: a guest kernel
	// that panics tells QEMU through the device, QEMU stops and the VMI ends Failed with reason
	// GuestPanicked (libvirt's default on_crash, destroy, which KubeVirt keeps). Each model at
	// most once. Without a panic device the host is not told of a panic: what follows is the
	// guest's own choice (Linux's panic= reboots it, which the VMI survives, or hangs it).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:XValidation:rule="self.size() < 2 || (has(self[0].model) ? self[0].model : 'isa') != (has(self[1].model) ? self[1].model : 'isa')",message="each panic device model may be listed once (a missing model is isa)"
	PanicDevices []PanicDevice `json:"panicDevices,omitempty"`
}

// Rng represents the random device passed from host.
type Rng struct{}

// PanicDeviceModel is the kind of a panic device. KubeVirt's enum is hyperv, isa and pvpanic;
// vmlet provides isa (QEMU's ISA pvpanic device at I/O port 0x505, which Linux drives with
// pvpanic-mmio through its ACPI node QEMU0001) and pvpanic (QEMU's pvpanic-pci, driven by
// pvpanic-pci), as libvirt maps them. hyperv (the Hyper-V crash MSRs, hv-crash) is refused:
// QEMU implements them only under KVM, for Windows guests, and vmlet has no Hyper-V
// enlightenments.
// +kubebuilder:validation:MaxLength=16
// +kubebuilder:validation:Enum=hyperv;isa;pvpanic
// +kubebuilder:validation:XValidation:rule="self != 'hyperv'",message="the hyperv panic device is not supported by vmlet (Hyper-V crash MSRs need KVM and Hyper-V enlightenments): use isa or pvpanic"
type PanicDeviceModel string

// Panic device models (KubeVirt's names).
const (
	// PanicDeviceHyperv is refused by the API (see PanicDeviceModel).
	PanicDeviceHyperv PanicDeviceModel = "hyperv"
	// PanicDeviceISA is QEMU's ISA pvpanic device (-device pvpanic), libvirt's default model on
	// x86_64.
	PanicDeviceISA PanicDeviceModel = "isa"
	// PanicDevicePvpanic is QEMU's PCI pvpanic device (-device pvpanic-pci).
	PanicDevicePvpanic PanicDeviceModel = "pvpanic"
)

// PanicDevice is a device through which the guest tells the host that it panicked.
type PanicDevice struct {
	// Model specifies what type of panic device is provided.
	// The panic model used when this attribute is missing depends on the hypervisor and guest
	// arch: isa here (x86_64). One of: isa, pvpanic (hyperv is KubeVirt's, not vmlet's).
	// +optional
	Model *PanicDeviceModel `json:"model,omitempty"`
}

// DiskBus is the bus a disk is attached to.
type DiskBus string

// Disk buses vmlet implements (KubeVirt's usb is not supported).
const (
	DiskBusVirtio DiskBus = "virtio"
	DiskBusSATA   DiskBus = "sata"
	DiskBusSCSI   DiskBus = "scsi"
)

// DriverCache is the host page-cache mode of a disk.
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:Enum=none;writethrough;writeback
type DriverCache string

// Cache modes.
const (
	// CacheNone - I/O from the guest is not cached on the host, but may be kept in a writeback
	// disk cache.
	CacheNone DriverCache = "none"
	// CacheWriteThrough - I/O from the guest is cached on the host but written through to the
	// physical medium.
	CacheWriteThrough DriverCache = "writethrough"
	// CacheWriteBack - I/O from the guest is cached on the host.
	CacheWriteBack DriverCache = "writeback"
)

// DriverIO is the QEMU disk I/O mode.
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:Enum=native;threads
type DriverIO string

// I/O modes.
const (
	// IOThreads - user mode threads perform I/O tasks.
	IOThreads DriverIO = "threads"
	// IONative - kernel native I/O (AIO); recommended only for fully preallocated storage.
	IONative DriverIO = "native"
)

// Disk attaches a volume to the guest as a disk, cdrom or lun.
//
// +kubebuilder:validation:XValidation:rule="(has(self.disk) ? 1 : 0) + (has(self.lun) ? 1 : 0) + (has(self.cdrom) ? 1 : 0) <= 1",message="a disk can only have a single target type defined (disk, lun or cdrom)"
// +kubebuilder:validation:XValidation:rule="!self.?dedicatedIOThread.orValue(false) || (!has(self.lun) && !has(self.cdrom) && self.?disk.?bus.orValue('virtio') == 'virtio')",message="dedicatedIOThread is only supported for disks on the virtio bus",fieldPath=".dedicatedIOThread"
type Disk struct {
	// Name is the device name; it must match the name of a volume.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// DiskDevice specifies as which device the disk should be added to the guest.
	// Defaults to Disk.
	DiskDevice `json:",inline"`
	// BootOrder is an integer value > 0, used to determine ordering of boot devices.
	// Lower values take precedence.
	// Each disk or interface that has a boot order must have a unique value.
	// Disks without a boot order are not tried if a disk with a boot order exists.
	// When no disk or interface has a boot order, the first disk or lun boots (never a cdrom;
	// libvirt's order, which groups disks by bus in the order of each bus's first disk).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	BootOrder *uint `json:"bootOrder,omitempty"`
	// Serial provides the ability to specify a serial number for the disk device.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.+-]+$`
	Serial string `json:"serial,omitempty"`
	// dedicatedIOThread indicates this disk should have an exclusive IO Thread.
	// Enabling this implies useIOThreads = true.
	// Defaults to false.
	// +optional
	DedicatedIOThread *bool `json:"dedicatedIOThread,omitempty"`
	// Cache specifies which kvm disk cache mode should be used.
	// Supported values are:
	// none: Guest I/O not cached on the host, but may be kept in a disk cache.
	// writethrough: Guest I/O cached on the host but written through to the physical medium. Slowest but with most guarantees.
	// writeback: Guest I/O cached on the host.
	// Defaults to none if the storage supports O_DIRECT, otherwise writethrough.
	// +optional
	Cache DriverCache `json:"cache,omitempty"`
	// IO specifies which QEMU disk IO mode should be used.
	// Supported values are: native, threads.
	// +optional
	IO DriverIO `json:"io,omitempty"`
}

// DiskDevice represents the target of a volume to mount.
// Only one of its members may be specified.
type DiskDevice struct {
	// Attach a volume as a disk to the vmi.
	// +optional
	Disk *DiskTarget `json:"disk,omitempty"`
	// Attach a volume as a LUN to the vmi.
	// +optional
	LUN *LunTarget `json:"lun,omitempty"`
	// Attach a volume as a cdrom to the vmi.
	// +optional
	CDRom *CDRomTarget `json:"cdrom,omitempty"`
}

// DiskTarget attaches a volume as a hard disk.
//
// +kubebuilder:validation:XValidation:rule="!has(self.pciAddress) || self.?bus.orValue('virtio') == 'virtio'",message="setting a PCI address is only possible with bus type virtio",fieldPath=".pciAddress"
// +kubebuilder:validation:XValidation:rule="!(self.?bus.orValue('virtio') == 'sata' && self.?readonly.orValue(false))",message="sata hard-disks do not support read-only",fieldPath=".readonly"
type DiskTarget struct {
	// Bus indicates the type of disk device to emulate.
	// supported values: virtio, sata, scsi. Defaults to virtio.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Enum=virtio;sata;scsi
	Bus DiskBus `json:"bus,omitempty"`
	// ReadOnly.
	// Defaults to false.
	// +optional
	ReadOnly bool `json:"readonly,omitempty"`
	// If specified, the virtual disk will be placed on the guests pci address with the
	// specified PCI address. For example: 0000:81:01.1
	// +optional
	// +kubebuilder:validation:MaxLength=12
	// +kubebuilder:validation:Pattern=`^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`
	PciAddress string `json:"pciAddress,omitempty"`
}

// LunTarget attaches a block volume as a SCSI LUN.
type LunTarget struct {
	// Bus indicates the type of disk device to emulate.
	// supported values: scsi. Defaults to scsi.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Enum=scsi
	Bus DiskBus `json:"bus,omitempty"`
	// ReadOnly.
	// Defaults to false.
	// +optional
	ReadOnly bool `json:"readonly,omitempty"`
}

// TrayState indicates if a tray of a cdrom is open or closed.
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:Enum=open;closed
type TrayState string

// Tray states.
const (
	// TrayStateOpen indicates that the tray of a cdrom is open.
	TrayStateOpen TrayState = "open"
	// TrayStateClosed indicates that the tray of a cdrom is closed.
	TrayStateClosed TrayState = "closed"
)

// CDRomTarget attaches a volume as a CD-ROM.
type CDRomTarget struct {
	// Bus indicates the type of disk device to emulate.
	// supported values: sata, scsi. Defaults to sata (virtio is invalid for CD-ROMs).
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Enum=sata;scsi
	Bus DiskBus `json:"bus,omitempty"`
	// ReadOnly.
	// Defaults to true.
	// +optional
	ReadOnly *bool `json:"readonly,omitempty"`
	// Tray indicates if the tray of the device is open or closed.
	// Allowed values are "open" and "closed".
	// Defaults to closed.
	// +optional
	Tray TrayState `json:"tray,omitempty"`
}

// Interface is a guest network interface connected to a network of the same name.
//
// +kubebuilder:validation:XValidation:rule="(has(self.bridge) ? 1 : 0) + (has(self.masquerade) ? 1 : 0) <= 1",message="an interface must have at most one binding method (bridge or masquerade)"
// +kubebuilder:validation:XValidation:rule="!has(self.ports) || self.ports.all(p, !has(p.name) || self.ports.filter(q, has(q.name) && q.name == p.name).size() == 1)",message="port names must be unique",fieldPath=".ports"
type Interface struct {
	// Logical name of the interface as well as a reference to the associated networks.
	// Must match the Name of a Network.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// Interface model.
	// One of: e1000, e1000e, igb, ne2k_pci, pcnet, rtl8139, virtio.
	// Defaults to virtio.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Enum=e1000;e1000e;igb;ne2k_pci;pcnet;rtl8139;virtio
	Model string `json:"model,omitempty"`
	// BindingMethod specifies the method which will be used to connect the interface to the
	// guest. At most one may be set; none means bridge, as in KubeVirt's default configuration.
	InterfaceBindingMethod `json:",inline"`
	// List of ports to be forwarded to the virtual machine.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Ports []Port `json:"ports,omitempty"`
	// Interface MAC address. For example: de:ad:00:00:be:af or DE-AD-00-00-BE-AF.
	// +optional
	// +kubebuilder:validation:MaxLength=17
	// +kubebuilder:validation:Pattern=`^([0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}$|^([0-9A-Fa-f]{2}-){5}[0-9A-Fa-f]{2}$`
	MacAddress string `json:"macAddress,omitempty"`
	// BootOrder is an integer value > 0, used to determine ordering of boot devices.
	// Lower values take precedence.
	// Each interface or disk that has a boot order must have a unique value.
	// Interfaces without a boot order are not tried.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	BootOrder *uint `json:"bootOrder,omitempty"`
	// If specified, the virtual network interface will be placed on the guests pci address with
	// the specified PCI address. For example: 0000:81:01.1
	// +optional
	// +kubebuilder:validation:MaxLength=12
	// +kubebuilder:validation:Pattern=`^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`
	PciAddress string `json:"pciAddress,omitempty"`
	// State represents the requested operational state of the interface.
	// The only value supported is 'absent', which hot-unplugs the interface from the running
	// guest (interfaces of multus networks with the bridge binding only); KubeVirt's link
	// states 'up' and 'down' are not supported by vmlet.
	// +optional
	// +kubebuilder:validation:Enum=absent
	State InterfaceState `json:"state,omitempty"`
}

// InterfaceState represents the requested operational state of an interface.
type InterfaceState string

// InterfaceStateAbsent asks for the interface to be hot-unplugged (KubeVirt's value).
const InterfaceStateAbsent InterfaceState = "absent"

// InterfaceBindingMethod represents the method which will be used to connect the interface to
// the guest. Only one of its members may be specified.
type InterfaceBindingMethod struct {
	// Bridge connects the interface to the pod interface through a linux bridge; the guest gets
	// the pod's IP address.
	// +optional
	Bridge *InterfaceBridge `json:"bridge,omitempty"`
	// Masquerade connects the interface through NAT (nftables) on the pod interface.
	// +optional
	Masquerade *InterfaceMasquerade `json:"masquerade,omitempty"`
}

// InterfaceBridge connects to a given network via a linux bridge.
type InterfaceBridge struct{}

// InterfaceMasquerade connects to a given network using netfilter rules to nat the traffic.
type InterfaceMasquerade struct{}

// Protocol is a transport protocol of a forwarded port.
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:Enum=TCP;UDP
type Protocol string

// Protocols.
const (
	ProtocolTCP Protocol = "TCP"
	ProtocolUDP Protocol = "UDP"
)

// Port represents a port to expose from the virtual machine.
// Default protocol TCP.
// The port field is mandatory.
type Port struct {
	// If specified, this must be an IANA_SVC_NAME and unique within the interface. Name for the
	// port that can be referred to by services.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`
	// Protocol for port. Must be UDP or TCP.
	// Defaults to "TCP".
	// +optional
	Protocol Protocol `json:"protocol,omitempty"`
	// Number of port to expose for the virtual machine.
	// This must be a valid port number, 0 < x < 65536.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}
