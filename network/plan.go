package network

import (
	"fmt"
	"net"
	"net/netip"
	"time"
)

// PodInterface is the observed state of a pod interface in the launcher's netns (Discover).
// For a bridge binding that was already applied it is the state before the binding, recorded
// in the interface's alias, so planning again gives the same plan.
type PodInterface struct {
	Name     string
	MAC      net.HardwareAddr
	MTU      int
	Addr     netip.Prefix // IPv4 address and prefix; zero if none
	Gateway  netip.Addr   // IPv4 default gateway; zero if none
	Addr6    netip.Prefix // global IPv6 address; zero if none
	Gateway6 netip.Addr
}

// PodState is what Discover read from the launcher's netns and the pod's resolv.conf.
type PodState struct {
	Interfaces []PodInterface
	// DNS is the pod's resolver configuration (loopback servers dropped: a guest cannot
	// reach the pod's loopback).
	DNS DNS
}

// Plan is what ApplyPlan builds in the launcher's netns for a Spec: pure data, computed by
// PlanBindings without touching the host.
type Plan struct {
	Interfaces []InterfacePlan
}

// InterfacePlan is the host side of one guest NIC.
type InterfacePlan struct {
	Name          string // logical name (the network's)
	Binding       Binding
	Pod           PodInterface // the pod interface as it was before the binding
	Bridge        string       // in-netns bridge, "k6t-eth0"
	BridgeMAC     net.HardwareAddr
	BridgeAddrs   []netip.Prefix // gateway address(es) (masquerade) or BridgeServerAddr (bridge)
	Tap           string         // the guest's tap, "tap0"
	Queues        int            // tap queue pairs = QEMU's queues
	MTU           int
	MAC           net.HardwareAddr // the guest's MAC
	PodMAC        net.HardwareAddr // bridge binding: the pod interface's new MAC
	Ports         []Port           // normalized (protocol set); masquerade only
	DHCP          DHCPConfig
	GuestAddr6    netip.Prefix  // masquerade with IPv6: the guest's address (by DHCPv6)
	Gateway6      netip.Addr    // the bridge's global IPv6 address
	DHCP6         *DHCPv6Config // nil without IPv6
	RA            *RAConfig     // nil without IPv6
	Table         *Table        // nftables table of this interface in the netns
	ForwardIPv4   bool          // enable net.ipv4.ip_forward in the netns
	ForwardIPv6   bool
	RouteLocalnet bool // net.ipv4.conf.<bridge>.route_localnet=1 (DNAT of 127.0.0.1)
}

// PlanBindings computes the kernel state and DHCP configuration for spec, given the pod state.
// It does not touch the host. Errors are *FieldError values (joined) matching ErrInvalidSpec,
// or ErrNoPodAddress when a bridge binding has no address to move.
func PlanBindings(spec *Spec, pod *PodState) (*Plan, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	nets := map[string]Network{}
	for _, n := range spec.Networks {
		nets[n.Name] = n
	}
	p := &Plan{}
	for _, ifc := range spec.Interfaces {
		n := nets[ifc.Name]
		podIf := PodInterfaceOf(n)
		var pi *PodInterface
		for j := range pod.Interfaces {
			if pod.Interfaces[j].Name == podIf {
				pi = &pod.Interfaces[j]
			}
		}
		if pi == nil {
			return nil, fmt.Errorf("plan interface %s: %w: %s not found in the pod", ifc.Name, ErrNoPodAddress, podIf)
		}
		ip, err := planInterface(spec, pod, ifc, n, *pi)
		if err != nil {
			return nil, err
		}
		p.Interfaces = append(p.Interfaces, ip)
	}
	return p, nil
}

func planInterface(spec *Spec, pod *PodState, ifc Interface, n Network, pi PodInterface) (InterfacePlan, error) {
	mtu := pi.MTU
	if mtu == 0 {
		mtu = 1500
	}
	ip := InterfacePlan{
		Name:    ifc.Name,
		Binding: ifc.Binding,
		Pod:     pi,
		Bridge:  bridgeName(pi.Name),
		Tap:     TapName(pi.Name),
		Queues:  queues(spec),
		MTU:     mtu,
	}
	dns := pod.DNS
	if spec.DNS != nil {
		dns = *spec.DNS
	}
	lease := spec.LeaseTime
	if lease == 0 {
		lease = DefaultLeaseTime
	}
	ip.DHCP = DHCPConfig{
		Interface: ip.Bridge,
		DNS:       dns.Servers,
		Search:    dns.Search,
		Hostname:  spec.Hostname,
		MTU:       mtu,
		LeaseTime: lease,
	}
	if ifc.MAC != "" {
		ip.MAC, _ = ParseMAC(ifc.MAC) // validated
	}
	switch ifc.Binding {
	case BindingMasquerade:
		planMasquerade(spec, ifc, n, &ip)
	case BindingBridge:
		if err := planBridge(spec, ifc, n, &ip); err != nil {
			return InterfacePlan{}, err
		}
	}
	ip.DHCP.ClientMAC = ip.MAC
	return ip, nil
}

func queues(spec *Spec) int {
	if !spec.MultiQueue || spec.VCPUs <= 1 {
		return 1
	}
	return min(spec.VCPUs, MaxQueues)
}

func planMasquerade(spec *Spec, ifc Interface, n Network, ip *InterfacePlan) {
	cidr := n.GuestCIDR
	if !cidr.IsValid() {
		cidr = DefaultGuestCIDR
	}
	gw := cidr.Addr().Next()
	guest := gw.Next()
	if ip.MAC == nil {
		ip.MAC = GenerateMAC(spec.UID, ifc.Name)
	}
	ip.BridgeMAC = GenerateMAC(spec.UID, ifc.Name+"/gateway")
	ip.BridgeAddrs = []netip.Prefix{netip.PrefixFrom(gw, cidr.Bits())}
	ip.DHCP.ServerAddr = gw
	ip.DHCP.Router = gw
	ip.DHCP.ClientAddr = netip.PrefixFrom(guest, cidr.Bits())
	ip.ForwardIPv4 = true
	ip.RouteLocalnet = true
	for _, p := range ifc.Ports {
		if p.Protocol == "" {
			p.Protocol = ProtocolTCP
		}
		ip.Ports = append(ip.Ports, p)
	}
	if ip.Pod.Addr6.IsValid() {
		cidr6 := n.GuestCIDR6
		if !cidr6.IsValid() {
			cidr6 = DefaultGuestCIDR6
		}
		gw6 := cidr6.Addr().Next()
		ip.Gateway6 = gw6
		ip.GuestAddr6 = netip.PrefixFrom(gw6.Next(), cidr6.Bits())
		ip.BridgeAddrs = append(ip.BridgeAddrs, netip.PrefixFrom(gw6, cidr6.Bits()), GatewayLinkLocal)
		ip.ForwardIPv6 = true
		ip.DHCP6 = &DHCPv6Config{
			Interface: ip.Bridge, ServerMAC: ip.BridgeMAC, ClientMAC: ip.MAC, ClientAddr: ip.GuestAddr6,
			DNS: ip.DHCP.DNS, Search: ip.DHCP.Search, LeaseTime: ip.DHCP.LeaseTime,
		}
		ip.RA = &RAConfig{
			Interface: ip.Bridge, Source: GatewayLinkLocal.Addr(), SourceMAC: ip.BridgeMAC,
			Prefix: cidr6, MTU: ip.MTU, RouterLifetime: 30 * time.Minute,
		}
	}
	ip.Table = masqueradeTable(ip)
	ip.Table.Name = tableName(n, ifc.Name)
}

func planBridge(spec *Spec, ifc Interface, n Network, ip *InterfacePlan) error {
	pi := ip.Pod
	if !pi.Addr.IsValid() {
		return fmt.Errorf("plan interface %s: %w: %s has no IPv4 address to hand to the guest", ifc.Name, ErrNoPodAddress, pi.Name)
	}
	if ip.MAC == nil {
		ip.MAC = pi.MAC // the guest takes over the pod's MAC, as in KubeVirt
	}
	ip.PodMAC = GenerateMAC(spec.UID, ifc.Name+"/pod")
	ip.BridgeMAC = GenerateMAC(spec.UID, ifc.Name+"/gateway")
	ip.BridgeAddrs = []netip.Prefix{BridgeServerAddr}
	ip.DHCP.ServerAddr = BridgeServerAddr.Addr()
	ip.DHCP.ClientAddr = pi.Addr
	if pi.Gateway.IsValid() && n.Pod { // a secondary network gives the guest no default route
		ip.DHCP.Router = pi.Gateway
		if !pi.Addr.Masked().Contains(pi.Gateway) {
			ip.DHCP.Routes = []StaticRoute{
				{Dest: netip.PrefixFrom(pi.Gateway, 32), Gateway: netip.IPv4Unspecified()},
				{Dest: netip.MustParsePrefix("0.0.0.0/0"), Gateway: pi.Gateway},
			}
		}
	}
	ip.Table = bridgeTable(ip)
	ip.Table.Name = tableName(n, ifc.Name)
	return nil
}
