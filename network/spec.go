package network

import (
	"net/netip"
	"slices"
	"time"
)

// Binding is how a guest interface is connected to its pod interface.
type Binding string

// Bindings, as in KubeVirt.
const (
	// BindingMasquerade puts the guest on a private subnet behind NAT in the launcher's netns:
	// egress is masqueraded to the pod address, declared ports (all when none) are DNATed from
	// the pod address to the guest.
	BindingMasquerade Binding = "masquerade"
	// BindingBridge bridges the pod interface with the guest's tap: the pod's address moves
	// to the guest, which gets it by DHCP.
	BindingBridge Binding = "bridge"
)

// Protocol is the transport protocol of a forwarded port.
type Protocol string

// Protocols of forwarded ports. Empty means TCP.
const (
	ProtocolTCP Protocol = "TCP"
	ProtocolUDP Protocol = "UDP"
)

// Port is a port forwarded from the pod address to the guest (masquerade binding).
type Port struct {
	Name     string   // optional, informational
	Protocol Protocol // TCP (default) or UDP
	Port     int      // 1..65535
}

// Spec is the network part of one VM, in plain Go types (the controllers translate the VMI).
type Spec struct {
	// UID is the VM's unique id (the VMI UID): generated MACs are derived from it and the
	// interface name, so they are stable across restarts and migrations.
	UID string
	// Hostname is offered to the guest by DHCP (option 12); empty offers none.
	Hostname string
	// Interfaces are the guest NICs, each on one network of Networks.
	Interfaces []Interface
	// Networks are the networks the interfaces refer to: at most one pod network, and
	// secondary networks (Network.Attachment).
	Networks []Network
	// VCPUs is the guest's vCPU count: the number of tap queues per NIC when MultiQueue.
	VCPUs int
	// MultiQueue gives every NIC one queue pair per vCPU (at most MaxQueues).
	MultiQueue bool
	// DNS is offered to guests; nil reads ResolvConf.
	DNS *DNS
	// ResolvConf is the pod's resolv.conf used when DNS is nil; empty means /etc/resolv.conf.
	ResolvConf string
	// LeaseTime of the DHCP leases; zero means DefaultLeaseTime.
	LeaseTime time.Duration
}

// Interface is one guest NIC.
type Interface struct {
	// Name is the interface's logical name and the name of its network in Spec.Networks.
	Name    string
	Binding Binding
	// MAC is the guest MAC ("52:54:00:12:34:56" or with dashes); empty generates one
	// (GenerateMAC), or for the bridge binding takes over the pod interface's MAC, as KubeVirt
	// does, so that neighbours of the pod keep reaching it.
	MAC string
	// Ports are forwarded from the pod address to the guest (masquerade only); none forwards
	// every port and protocol.
	Ports []Port
}

// Network is a network interfaces attach to.
type Network struct {
	Name string
	// Pod marks the pod network: the launcher's pod interface (PodInterface, "eth0").
	Pod bool
	// Attachment names a secondary network instead (Multus's network attachment in a cluster;
	// in local mode a second veth to the node bridge, Node.AddInterface): its pod interface is
	// PodInterface, by default SecondaryInterfaceName(Name). Secondary networks take the
	// bridge binding only, and guests learn no default route from them.
	Attachment string
	// GuestCIDR is the masquerade guest subnet; zero means DefaultGuestCIDR. The gateway is
	// its first address, the guest its second.
	GuestCIDR netip.Prefix
	// GuestCIDR6 is the IPv6 masquerade guest subnet; zero means DefaultGuestCIDR6. Used only
	// when the pod interface has a global IPv6 address.
	GuestCIDR6 netip.Prefix
	// PodInterface is the interface in the launcher's netns; empty means PodInterfaceOf's
	// default ("eth0" for the pod network).
	PodInterface string
}

// DNS is the resolver configuration offered to guests.
type DNS struct {
	Servers []netip.Addr
	Search  []string
}

// Defaults of the binding side.
var (
	// DefaultGuestCIDR is KubeVirt's masquerade subnet: gateway 10.0.2.1, guest 10.0.2.2. It
	// only exists inside the launcher's netns, so it cannot collide with anything outside.
	DefaultGuestCIDR = netip.MustParsePrefix("10.0.2.0/24")
	// DefaultGuestCIDR6 is KubeVirt's IPv6 masquerade subnet.
	DefaultGuestCIDR6 = netip.MustParsePrefix("fd10:0:2::/120")
	// BridgeServerAddr is the link-local address the bridge binding's in-pod bridge gets, so
	// its DHCP server has a source address once the pod address moved to the guest (KubeVirt
	// uses the same trick).
	BridgeServerAddr = netip.MustParsePrefix("169.254.75.10/32")
)

const (
	// DefaultPodInterface is the launcher's pod interface.
	DefaultPodInterface = "eth0"
	// DefaultLeaseTime is the DHCP lease time when Spec.LeaseTime is zero.
	DefaultLeaseTime = 24 * time.Hour
	// MaxQueues caps the tap queues of one NIC (the kernel's MAX_TAP_QUEUES is 256; virtio-net
	// needs 2 vectors per queue pair).
	MaxQueues = 64
	// MaxInterfaces is the most NICs one spec may have (KubeVirt's API limit).
	MaxInterfaces = 16
)

// Select returns a copy of s with only the named interfaces (in s's order) and their networks.
func (s *Spec) Select(names ...string) *Spec {
	out := *s
	out.Interfaces, out.Networks = nil, nil
	for _, ifc := range s.Interfaces {
		if slices.Contains(names, ifc.Name) {
			out.Interfaces = append(out.Interfaces, ifc)
		}
	}
	for _, n := range s.Networks {
		if slices.Contains(names, n.Name) {
			out.Networks = append(out.Networks, n)
		}
	}
	return &out
}
