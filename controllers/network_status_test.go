package controllers

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/network"
)

func TestInterfaceStatuses(t *testing.T) {
	const mac = "02:00:00:00:00:0a"
	pod, guest := netip.MustParseAddr("198.19.118.5"), netip.MustParseAddr("10.0.2.2")
	attached := network.InterfaceStatus{Name: "default", MAC: mac, PodInterface: "eth0", Queues: 2}
	moved := attached // migrated: the target pod's address, its DHCP server has seen no lease
	target := netip.MustParseAddr("198.19.130.7")
	moved.PodIPs = []netip.Addr{target}
	onTarget := confirmedOn(target)
	leased := attached
	leased.IPs, leased.GuestIPs = []netip.Addr{pod}, []netip.Addr{guest}
	domain := vmletv1.VirtualMachineInstanceNetworkInterface{Name: "default", MAC: mac, PodInterfaceName: "eth0", QueueCount: 2, InfoSource: "domain"}
	withIP := domain
	withIP.IP, withIP.IPs = pod.String(), []string{pod.String()}
	confirmed := withIP
	confirmed.InterfaceName, confirmed.InfoSource = "eth0", "domain, guest-agent"
	agentOK := []GuestInterface{{Name: "lo", MAC: "00:00:00:00:00:00", IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}, {Name: "eth0", MAC: mac, IPs: []netip.Addr{guest}}}
	otherMAC := withIP
	otherMAC.MAC = "02:00:00:00:00:99"
	pod6, guest6 := netip.MustParseAddr("fd76:6d6c:6574:1::5"), netip.MustParseAddr("fd10:0:2::2")
	leased6 := attached // DHCPv6 only: a restarted agent saw the guest renew its IPv6 lease first
	leased6.IPs, leased6.GuestIPs = []netip.Addr{pod6}, []netip.Addr{guest6}
	both := attached
	both.IPs, both.GuestIPs = []netip.Addr{pod, pod6}, []netip.Addr{guest, guest6}
	confirmedBoth := confirmed
	confirmedBoth.IPs = []string{pod.String(), pod6.String()}
	withBoth := withIP
	withBoth.IPs = confirmedBoth.IPs
	agentBoth := []GuestInterface{{Name: "eth0", MAC: mac, IPs: []netip.Addr{guest, guest6, netip.MustParseAddr("fe80::1:2")}}}

	tests := []struct {
		name      string
		prev      []vmletv1.VirtualMachineInstanceNetworkInterface
		st        network.InterfaceStatus
		guest     []GuestInterface
		want      vmletv1.VirtualMachineInstanceNetworkInterface
		needAgent bool
	}{
		{name: "attached, no lease yet", st: attached, want: domain},
		{name: "leased: the pod address, the agent not asked yet", st: leased, want: withIP, needAgent: true},
		{name: "the agent agrees", st: leased, guest: agentOK, want: confirmed},
		{name: "the agent shows another address", st: leased, want: withIP, needAgent: true,
			guest: []GuestInterface{{Name: "eth0", MAC: mac, IPs: []netip.Addr{netip.MustParseAddr("10.0.2.9")}}}},
		{name: "the agent shows the address on another MAC", st: leased, want: withIP, needAgent: true,
			guest: []GuestInterface{{Name: "eth1", MAC: "02:00:00:00:00:02", IPs: []netip.Addr{guest}}}},
		{name: "the agent's MAC in upper case", st: leased, want: confirmed,
			guest: []GuestInterface{{Name: "eth0", MAC: "02:00:00:00:00:0A", IPs: []netip.Addr{guest}}}},
		{name: "confirmed before, same address: no need to ask again", prev: []vmletv1.VirtualMachineInstanceNetworkInterface{confirmed}, st: leased, want: confirmed},
		{name: "agent restarted, lease not seen yet: the status keeps the address", prev: []vmletv1.VirtualMachineInstanceNetworkInterface{confirmed}, st: attached, want: confirmed},
		{name: "agent restarted under masquerade: the pod's address", prev: []vmletv1.VirtualMachineInstanceNetworkInterface{confirmed}, st: withPod(attached, pod), want: confirmed},
		{name: "migrated to another pod, lease not seen: the new pod's address", prev: []vmletv1.VirtualMachineInstanceNetworkInterface{confirmed}, st: moved, want: onTarget},
		{name: "a previous status of another MAC is not kept", prev: []vmletv1.VirtualMachineInstanceNetworkInterface{otherMAC}, st: attached, want: domain},
		{name: "dual stack: both pod addresses, IPv4 first", st: both, want: withBoth, needAgent: true},
		{name: "dual stack: the agent agrees", st: both, guest: agentBoth, want: confirmedBoth},
		{name: "dual stack, IPv6 lease added to a confirmed IPv4 one: ask again", prev: []vmletv1.VirtualMachineInstanceNetworkInterface{confirmed}, st: both, want: withBoth, needAgent: true},
		{name: "dual stack, agent restarted, only the IPv4 lease seen: the IPv6 address stays", prev: []vmletv1.VirtualMachineInstanceNetworkInterface{confirmedBoth}, st: leased, want: confirmedBoth},
		{name: "dual stack, agent restarted, only the IPv6 lease seen: the IPv4 address stays first", prev: []vmletv1.VirtualMachineInstanceNetworkInterface{confirmedBoth}, st: leased6, want: confirmedBoth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, need := interfaceStatuses(tt.prev, []network.InterfaceStatus{tt.st}, tt.guest)
			if len(got) != 1 || fmt.Sprintf("%+v", got[0]) != fmt.Sprintf("%+v", tt.want) || need != tt.needAgent {
				t.Errorf("got %+v needAgent=%v\nwant %+v needAgent=%v", got, need, tt.want, tt.needAgent)
			}
		})
	}
}

// confirmedOn is the status of the test's interface confirmed by the agent at pod address a.
func confirmedOn(a netip.Addr) vmletv1.VirtualMachineInstanceNetworkInterface {
	return vmletv1.VirtualMachineInstanceNetworkInterface{Name: "default", MAC: "02:00:00:00:00:0a", PodInterfaceName: "eth0", QueueCount: 2,
		InfoSource: "domain, guest-agent", InterfaceName: "eth0", IP: a.String(), IPs: []string{a.String()}}
}

func withPod(st network.InterfaceStatus, ips ...netip.Addr) network.InterfaceStatus {
	st.PodIPs = ips
	return st
}

func TestAddressChanges(t *testing.T) {
	ifc := func(name string, ips ...string) vmletv1.VirtualMachineInstanceNetworkInterface {
		return vmletv1.VirtualMachineInstanceNetworkInterface{Name: name, IPs: ips}
	}
	tests := []struct {
		name      string
		prev, cur []vmletv1.VirtualMachineInstanceNetworkInterface
		want      []string
	}{
		{name: "first address", cur: []vmletv1.VirtualMachineInstanceNetworkInterface{ifc("a", "198.19.118.2")},
			want: []string{"interface a: 198.19.118.2 (was none)"}},
		{name: "unchanged", prev: []vmletv1.VirtualMachineInstanceNetworkInterface{ifc("a", "198.19.118.2")},
			cur: []vmletv1.VirtualMachineInstanceNetworkInterface{ifc("a", "198.19.118.2")}},
		{name: "changed, dual stack", prev: []vmletv1.VirtualMachineInstanceNetworkInterface{ifc("a", "198.19.118.2")},
			cur:  []vmletv1.VirtualMachineInstanceNetworkInterface{ifc("a", "198.19.118.3", "fd76:6d6c:6574:1::3")},
			want: []string{"interface a: 198.19.118.3, fd76:6d6c:6574:1::3 (was 198.19.118.2)"}},
		{name: "no address yet", cur: []vmletv1.VirtualMachineInstanceNetworkInterface{ifc("a")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := addressChanges(tt.prev, tt.cur); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestConfiguredOnPod(t *testing.T) {
	const mac = "02:00:00:00:00:0a"
	pod4, pod6 := netip.MustParseAddr("198.19.130.7"), netip.MustParseAddr("fd76:6d6c:6574:2::7")
	st := network.InterfaceStatus{Name: "default", MAC: mac, PodInterface: "eth0", PodIPs: []netip.Addr{pod4, pod6}}
	bare := vmletv1.VirtualMachineInstanceNetworkInterface{Name: "default", MAC: mac, PodInterfaceName: "eth0", InfoSource: "domain"}
	for _, tc := range []struct {
		name  string
		st    network.InterfaceStatus
		guest []GuestInterface
		want  []string
	}{
		{"IPv4 configured in the guest", st, []GuestInterface{{Name: "eth0", MAC: mac, IPs: []netip.Addr{netip.MustParseAddr("10.0.2.2"), netip.MustParseAddr("fe80::1")}}}, []string{pod4.String()}},
		{"both families", st, []GuestInterface{{Name: "eth0", MAC: "02:00:00:00:00:0A", IPs: []netip.Addr{netip.MustParseAddr("10.0.2.2"), netip.MustParseAddr("fd10:0:2::2")}}}, []string{pod4.String(), pod6.String()}},
		{"only link-local: not configured", st, []GuestInterface{{Name: "eth0", MAC: mac, IPs: []netip.Addr{netip.MustParseAddr("fe80::1")}}}, nil},
		{"another MAC", st, []GuestInterface{{Name: "eth1", MAC: "02:00:00:00:00:99", IPs: []netip.Addr{netip.MustParseAddr("10.0.2.2")}}}, nil},
		{"bridge binding (no pod addresses)", network.InterfaceStatus{Name: "default", MAC: mac}, []GuestInterface{{Name: "eth0", MAC: mac, IPs: []netip.Addr{netip.MustParseAddr("10.0.2.2")}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := configuredOnPod([]vmletv1.VirtualMachineInstanceNetworkInterface{bare}, []network.InterfaceStatus{tc.st}, tc.guest)
			if !slices.Equal(got[0].IPs, tc.want) {
				t.Fatalf("IPs %v, want %v", got[0].IPs, tc.want)
			}
			if len(tc.want) > 0 && (got[0].IP != tc.want[0] || got[0].InfoSource != "domain, guest-agent" || got[0].InterfaceName == "") {
				t.Fatalf("got %+v", got[0])
			}
		})
	}
}

func TestWithGuestOnly(t *testing.T) {
	const mac, other = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
	domain := []vmletv1.VirtualMachineInstanceNetworkInterface{{Name: "default", MAC: mac, InfoSource: "domain"}}
	v4, v6 := netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("fe80::b")
	guest := []GuestInterface{
		{Name: "lo", MAC: "00:00:00:00:00:00", IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
		{Name: "eth0", MAC: "02:00:00:00:00:0A"}, // the domain's NIC (MAC case differs): not repeated
		{Name: "dummy0", MAC: other, IPs: []netip.Addr{v6, v4}},
	}
	guestOnly := vmletv1.VirtualMachineInstanceNetworkInterface{MAC: other, InterfaceName: "dummy0", InfoSource: "guest-agent",
		IP: v4.String(), IPs: []string{v4.String(), v6.String()}}
	cases := []struct {
		name  string
		prev  []vmletv1.VirtualMachineInstanceNetworkInterface
		guest []GuestInterface
		want  []vmletv1.VirtualMachineInstanceNetworkInterface
	}{
		{name: "guest-only interface added, lo and the domain's NIC not", guest: guest,
			want: append(slices.Clone(domain), guestOnly)},
		{name: "no view of the agent keeps the previous guest-only ones", prev: append(slices.Clone(domain), guestOnly),
			want: append(slices.Clone(domain), guestOnly)},
		{name: "gone from the agent's answer: dropped", prev: append(slices.Clone(domain), guestOnly), guest: guest[:2],
			want: domain},
		{name: "nothing known", want: domain},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := withGuestOnly(slices.Clone(domain), c.prev, c.guest)
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}
