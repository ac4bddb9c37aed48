package translate

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/launcher"
)

// netView is the network part of a Desired: the binding spec, the boot NICs, the hotplug NICs.
type netView struct {
	Network *network.Spec
	NICs    []qemu.NIC
	Hot     []HotNIC
}

func TestTranslateNetwork(t *testing.T) {
	genMAC := func(name string) string { return network.GenerateMAC(testUID, name).String() }
	nic := func(id, mac string, queues int) qemu.NIC {
		return qemu.NIC{ID: id, MAC: mac, TapName: "tap0", Queues: queues}
	}
	pod := []network.Network{{Name: "default", Pod: true}}
	masq := []network.Interface{{Name: "default", Binding: network.BindingMasquerade}}
	bridge := []network.Interface{{Name: "default", Binding: network.BindingBridge}}
	spec := func(f func(*network.Spec)) *network.Spec {
		s := &network.Spec{UID: testUID, Hostname: "demo", VCPUs: 1, Interfaces: bridge, Networks: pod}
		if f != nil {
			f(s)
		}
		return s
	}
	withIfaces := func(ifaces []vmletv1.Interface, nets ...vmletv1.Network) func(*vmletv1.VirtualMachineInstance) {
		return func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces, v.Spec.Networks = ifaces, nets
		}
	}
	no, yes := false, true
	long := strings.Repeat("a", 40)
	node := network.SecondaryInterfaceName("node")
	tests := []struct {
		name   string
		mutate func(*vmletv1.VirtualMachineInstance)
		want   netView
	}{
		{name: "autoattach: one bridge interface on the pod network, as KubeVirt",
			want: netView{Network: spec(nil), NICs: []qemu.NIC{nic("net-default", genMAC("default"), 1)}}},
		{name: "autoattachPodInterface false: no network at all",
			mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Devices.AutoattachPodInterface = &no }},
		{name: "masquerade with ports and a generated MAC", mutate: withIfaces([]vmletv1.Interface{{Name: "default",
			InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}},
			Ports:                  []vmletv1.Port{{Name: "http", Port: 80, Protocol: vmletv1.ProtocolTCP}, {Port: 53, Protocol: vmletv1.ProtocolUDP}, {Port: 22}}}},
			podNet("default")),
			want: netView{Network: spec(func(s *network.Spec) {
				s.Interfaces = []network.Interface{{Name: "default", Binding: network.BindingMasquerade,
					Ports: []network.Port{{Name: "http", Protocol: network.ProtocolTCP, Port: 80}, {Protocol: network.ProtocolUDP, Port: 53}, {Port: 22}}}}
			}), NICs: []qemu.NIC{nic("net-default", genMAC("default"), 1)}}},
		{name: "macAddress with dashes and upper case is normalized", mutate: withIfaces([]vmletv1.Interface{{Name: "default",
			InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}}, MacAddress: "DE-AD-00-00-BE-AF"}},
			podNet("default")),
			want: netView{Network: spec(func(s *network.Spec) {
				s.Interfaces = []network.Interface{{Name: "default", Binding: network.BindingMasquerade, MAC: "de:ad:00:00:be:af"}}
			}), NICs: []qemu.NIC{nic("net-default", "de:ad:00:00:be:af", 1)}}},
		{name: "interface without binding is bridge", mutate: withIfaces([]vmletv1.Interface{{Name: "pod", Model: "virtio"}}, podNet("pod")),
			want: netView{Network: spec(func(s *network.Spec) {
				s.Interfaces = []network.Interface{{Name: "pod", Binding: network.BindingBridge}}
				s.Networks = []network.Network{{Name: "pod", Pod: true}}
			}), NICs: []qemu.NIC{nic("net-pod", genMAC("pod"), 1)}}},
		{name: "custom guest CIDRs", mutate: func(v *vmletv1.VirtualMachineInstance) {
			n := podNet("default")
			n.Pod.VMNetworkCIDR, n.Pod.VMIPv6NetworkCIDR = "10.11.0.0/24", "fd20::/120"
			withIfaces([]vmletv1.Interface{masqIface("default")}, n)(v)
		}, want: netView{Network: spec(func(s *network.Spec) {
			s.Interfaces = masq
			s.Networks = []network.Network{{Name: "default", Pod: true,
				GuestCIDR: netip.MustParsePrefix("10.11.0.0/24"), GuestCIDR6: netip.MustParsePrefix("fd20::/120")}}
		}), NICs: []qemu.NIC{nic("net-default", genMAC("default"), 1)}}},
		{name: "multiqueue: queues = vCPUs", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.CPU = &vmletv1.CPU{Sockets: 1, Cores: 2, Threads: 2}
			v.Spec.Domain.Devices.NetworkInterfaceMultiQueue = &yes
		}, want: netView{Network: spec(func(s *network.Spec) { s.VCPUs, s.MultiQueue = 4, true }),
			NICs: []qemu.NIC{nic("net-default", genMAC("default"), 4)}}},
		{name: "multiqueue off: one queue whatever the vCPUs", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.CPU = &vmletv1.CPU{Cores: 4}
		}, want: netView{Network: spec(func(s *network.Spec) { s.VCPUs = 4 }),
			NICs: []qemu.NIC{nic("net-default", genMAC("default"), 1)}}},
		{name: "multiqueue capped at QEMU's limit", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.CPU = &vmletv1.CPU{Sockets: 2, Cores: 16}
			v.Spec.Domain.Devices.NetworkInterfaceMultiQueue = &yes
		}, want: netView{Network: spec(func(s *network.Spec) { s.VCPUs, s.MultiQueue = 16, true }),
			NICs: []qemu.NIC{nic("net-default", genMAC("default"), 16)}}},
		{name: "hostname from spec", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Hostname = "web" },
			want: netView{Network: spec(func(s *network.Spec) { s.Hostname = "web" }), NICs: []qemu.NIC{nic("net-default", genMAC("default"), 1)}}},
		{name: "hostname from a dotted name", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Name = "db.prod" },
			want: netView{Network: spec(func(s *network.Spec) { s.Hostname = "db" }), NICs: []qemu.NIC{nic("net-default", genMAC("default"), 1)}}},
		{name: "hostname cut to 63 characters", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Name = strings.Repeat("h", 70) + ".x" },
			want: netView{Network: spec(func(s *network.Spec) { s.Hostname = strings.Repeat("h", 63) }), NICs: []qemu.NIC{nic("net-default", genMAC("default"), 1)}}},
		{name: "long interface name gets a hashed NIC id", mutate: withIfaces([]vmletv1.Interface{masqIface(long)}, podNet(long)),
			want: netView{Network: spec(func(s *network.Spec) {
				s.Interfaces = []network.Interface{{Name: long, Binding: network.BindingMasquerade}}
				s.Networks = []network.Network{{Name: long, Pod: true}}
			}), NICs: []qemu.NIC{nic("net-aaaaaaaaaaaaaaa-e33cdf9c", genMAC(long), 1)}}},
		{name: "interface bootOrder boots the NIC", mutate: func(v *vmletv1.VirtualMachineInstance) {
			i := masqIface("default")
			i.BootOrder = ptr.To[uint](2)
			withIfaces([]vmletv1.Interface{i}, podNet("default"))(v)
		}, want: netView{Network: spec(func(s *network.Spec) { s.Interfaces = masq }),
			NICs: []qemu.NIC{{ID: "net-default", MAC: genMAC("default"), TapName: "tap0", Queues: 1, BootIndex: 2}}}},
		{name: "a multus interface is hotplugged, also when listed at creation",
			mutate: withIfaces([]vmletv1.Interface{masqIface("default"), {Name: "node"}}, podNet("default"), multusNet("node", "ns/vmlet-node")),
			want: netView{Network: spec(func(s *network.Spec) {
				s.Interfaces = []network.Interface{masq[0], {Name: "node", Binding: network.BindingBridge}}
				s.Networks = []network.Network{pod[0], {Name: "node", Attachment: "ns/vmlet-node"}}
			}), NICs: []qemu.NIC{nic("net-default", genMAC("default"), 1)},
				Hot: []HotNIC{{Name: "node", PodInterface: node, NIC: qemu.NIC{ID: "net-node", MAC: genMAC("node"), TapName: network.TapName(node), Queues: 1}}}}},
		{name: "absent interfaces and their networks are left out", mutate: func(v *vmletv1.VirtualMachineInstance) {
			gone := vmletv1.Interface{Name: "gone", State: vmletv1.InterfaceStateAbsent}
			withIfaces([]vmletv1.Interface{masqIface("default"), gone}, podNet("default"), multusNet("gone", "vmlet-node"))(v)
		}, want: netView{Network: spec(func(s *network.Spec) { s.Interfaces = masq }), NICs: []qemu.NIC{nic("net-default", genMAC("default"), 1)}}},
		{name: "only a multus interface: nothing at boot", mutate: withIfaces([]vmletv1.Interface{{Name: "node"}}, multusNet("node", "vmlet-node")),
			want: netView{Network: spec(func(s *network.Spec) {
				s.Interfaces = []network.Interface{{Name: "node", Binding: network.BindingBridge}}
				s.Networks = []network.Network{{Name: "node", Attachment: "vmlet-node"}}
			}), Hot: []HotNIC{{Name: "node", PodInterface: node, NIC: qemu.NIC{ID: "net-node", MAC: genMAC("node"), TapName: network.TapName(node), Queues: 1}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			if tt.mutate != nil {
				tt.mutate(vmi)
			}
			d, err := Translate(vmi, testEnv(), Referenced{})
			if err != nil {
				t.Fatalf("Translate: %v", err)
			}
			got := netView{Network: d.Network, NICs: d.Spec.NICs, Hot: d.HotplugNICs}
			if diff := cmp.Diff(tt.want, got, cmpOpts); diff != "" {
				t.Errorf("network (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBootNetwork: the boot part of the network leaves the hotplugged interfaces out.
func TestBootNetwork(t *testing.T) {
	vmi := baseVMI()
	vmi.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "node"}, masqIface("default")}
	vmi.Spec.Networks = []vmletv1.Network{multusNet("node", "vmlet-node"), podNet("default")}
	d, err := Translate(vmi, testEnv(), Referenced{})
	if err != nil {
		t.Fatal(err)
	}
	want := &network.Spec{UID: testUID, Hostname: "demo", VCPUs: 1,
		Interfaces: []network.Interface{{Name: "default", Binding: network.BindingMasquerade}},
		Networks:   []network.Network{{Name: "default", Pod: true}}}
	if diff := cmp.Diff(want, d.BootNetwork(), cmpOpts); diff != "" {
		t.Errorf("BootNetwork (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"default"}, d.BootInterfaces()); diff != "" {
		t.Errorf("BootInterfaces (-want +got):\n%s", diff)
	}
	none := &Desired{}
	if none.BootNetwork() != nil || none.BootInterfaces() != nil {
		t.Errorf("no network: BootNetwork %v, BootInterfaces %v", none.BootNetwork(), none.BootInterfaces())
	}
}

// TestNICQueueLimitIsQEMUs fails when qemu's per-NIC queue limit moves away from maxNICQueues.
func TestNICQueueLimitIsQEMUs(t *testing.T) {
	spec := func(q int) *qemu.Spec {
		return &qemu.Spec{Name: "q", MemoryMiB: 128, NICs: []qemu.NIC{{ID: "net-a", MAC: "02:00:00:00:00:01", TapName: "tap0", Queues: q}}}
	}
	if err := spec(maxNICQueues).Validate(); err != nil {
		t.Errorf("qemu rejects %d queues: %v", maxNICQueues, err)
	}
	if err := spec(maxNICQueues + 1).Validate(); err == nil {
		t.Errorf("qemu accepts %d queues: raise maxNICQueues", maxNICQueues+1)
	}
}

func TestNICID(t *testing.T) {
	long := strings.Repeat("x", 63)
	for _, name := range []string{"default", "0net", "a-b", strings.Repeat("y", 24), strings.Repeat("y", 25), long, long[:62] + "z"} {
		id := NICID(name)
		if !nicIDRe.MatchString(id) || !strings.HasPrefix(id, "net-") {
			t.Errorf("NICID(%q) = %q: not a QEMU id", name, id)
		}
	}
	if NICID(long) == NICID(long[:62]+"z") {
		t.Error("distinct long names share an id")
	}
	if got := NICID("default"); got != "net-default" {
		t.Errorf("NICID(default) = %q", got)
	}
}

// TestResolveNICs plans the bindings purely (network.PlanBindings on a pod state) and checks
// the NICs the domain starts with: the bridge binding hands the pod's MAC to the guest.
func TestResolveNICs(t *testing.T) {
	podMAC, _ := net.ParseMAC("02:11:22:33:44:55")
	pod := &network.PodState{Interfaces: []network.PodInterface{{
		Name: "eth0", MAC: podMAC, MTU: 1500,
		Addr: netip.MustParsePrefix("198.19.118.2/24"), Gateway: netip.MustParseAddr("198.19.118.1"),
	}}}
	yes := true
	tests := []struct {
		name    string
		mutate  func(*vmletv1.VirtualMachineInstance)
		wantMAC string
		queues  int
	}{
		{name: "bridge takes the pod's MAC", wantMAC: "02:11:22:33:44:55", queues: 1},
		{name: "bridge with macAddress", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default", MacAddress: "02:00:00:00:00:07"}}
			v.Spec.Networks = []vmletv1.Network{podNet("default")}
		}, wantMAC: "02:00:00:00:00:07", queues: 1},
		{name: "masquerade multiqueue", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{masqIface("default")}
			v.Spec.Networks = []vmletv1.Network{podNet("default")}
			v.Spec.Domain.CPU = &vmletv1.CPU{Cores: 3}
			v.Spec.Domain.Devices.NetworkInterfaceMultiQueue = &yes
		}, wantMAC: network.GenerateMAC(testUID, "default").String(), queues: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			if tt.mutate != nil {
				tt.mutate(vmi)
			}
			d, err := Translate(vmi, testEnv(), Referenced{})
			if err != nil {
				t.Fatal(err)
			}
			plan, err := network.PlanBindings(d.Network, pod)
			if err != nil {
				t.Fatal(err)
			}
			nics, ns, err := ResolveNICs(d.Spec.NICs, plan, "/run/netns/vmlet-x")
			if err != nil {
				t.Fatal(err)
			}
			want := []qemu.NIC{{ID: "net-default", MAC: tt.wantMAC, TapName: "tap0", Queues: tt.queues}}
			if diff := cmp.Diff(want, nics); diff != "" {
				t.Errorf("nics (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(launcher.NetNS{"net-default": "/run/netns/vmlet-x"}, ns); diff != "" {
				t.Errorf("netns (-want +got):\n%s", diff)
			}
			s := &qemu.Spec{Name: "r", MemoryMiB: 128, NICs: nics}
			if err := s.Validate(); err != nil {
				t.Errorf("resolved NICs are not a valid domain: %v", err)
			}
		})
	}
	d, err := Translate(baseVMI(), testEnv(), Referenced{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ResolveNICs(d.Spec.NICs, &network.Plan{}, "/x"); err == nil {
		t.Error("ResolveNICs accepts a plan without the planned interface")
	}
}
