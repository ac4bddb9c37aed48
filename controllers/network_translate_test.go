package controllers

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/qemu"
)

func masqIface(name string) vmletv1.Interface {
	return vmletv1.Interface{Name: name, InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}}}
}

func podNet(name string) vmletv1.Network {
	return vmletv1.Network{Name: name, NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}
}

// fmtNetwork prints what NetworkSpec decided, one line, for substring checks.
func fmtNetwork(n *VMINetwork) string {
	if n.Spec == nil {
		return fmt.Sprintf("spec=nil nics=%+v", n.NICs)
	}
	s := *n.Spec
	return fmt.Sprintf("uid=%s host=%s vcpus=%d mq=%v ifaces=%+v nets=%+v nics=%+v", s.UID, s.Hostname, s.VCPUs, s.MultiQueue, s.Interfaces, s.Networks, n.NICs)
}

func TestNetworkSpec(t *testing.T) {
	uid := "6f1c3c1e-7a55-4a4e-9d4f-2d1c9b3c0a11"
	genMAC := network.GenerateMAC(uid, "default").String()
	no, yes := false, true
	tests := []struct {
		name    string
		mutate  func(*vmletv1.VirtualMachineInstance)
		want    []string // substrings of fmtNetwork
		wantErr error    // nil: success; ErrUnsupported or errInvalid
		field   string
	}{
		{name: "autoattach: one bridge interface on the pod network, as KubeVirt",
			want: []string{"host=demo", "vcpus=1", "mq=false", "{Name:default Binding:bridge MAC: Ports:[]}", "{Name:default Pod:true",
				"{ID:net-default MAC:" + genMAC + " TapFDs:[] TapName:tap0 Queues:1"}},
		{name: "autoattachPodInterface false: no network at all",
			mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Devices.AutoattachPodInterface = &no },
			want:   []string{"spec=nil nics=[]"}},
		{name: "masquerade with ports and a generated MAC", mutate: func(v *vmletv1.VirtualMachineInstance) {
			i := masqIface("default")
			i.Ports = []vmletv1.Port{{Name: "http", Port: 80, Protocol: vmletv1.ProtocolTCP}, {Port: 53, Protocol: vmletv1.ProtocolUDP}, {Port: 22}}
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{i}
			v.Spec.Networks = []vmletv1.Network{podNet("default")}
		}, want: []string{"Binding:masquerade MAC: Ports:[{Name:http Protocol:TCP Port:80} {Name: Protocol:UDP Port:53} {Name: Protocol: Port:22}]",
			"MAC:" + genMAC}},
		{name: "macAddress with dashes and upper case is normalized", mutate: func(v *vmletv1.VirtualMachineInstance) {
			i := masqIface("default")
			i.MacAddress = "DE-AD-00-00-BE-AF"
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{i}
			v.Spec.Networks = []vmletv1.Network{podNet("default")}
		}, want: []string{"Binding:masquerade MAC:de:ad:00:00:be:af", "ID:net-default MAC:de:ad:00:00:be:af"}},
		{name: "interface without binding is bridge", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "pod", Model: "virtio"}}
			v.Spec.Networks = []vmletv1.Network{podNet("pod")}
		}, want: []string{"{Name:pod Binding:bridge", "ID:net-pod MAC:" + network.GenerateMAC(uid, "pod").String()}},
		{name: "custom guest CIDRs", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{masqIface("default")}
			n := podNet("default")
			n.Pod.VMNetworkCIDR, n.Pod.VMIPv6NetworkCIDR = "10.11.0.0/24", "fd20::/120"
			v.Spec.Networks = []vmletv1.Network{n}
		}, want: []string{"GuestCIDR:10.11.0.0/24 GuestCIDR6:fd20::/120"}},
		{name: "multiqueue: queues = vCPUs", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.CPU = &vmletv1.CPU{Sockets: 1, Cores: 2, Threads: 2}
			v.Spec.Domain.Devices.NetworkInterfaceMultiQueue = &yes
		}, want: []string{"vcpus=4 mq=true", "TapName:tap0 Queues:4"}},
		{name: "multiqueue off: one queue whatever the vCPUs", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.CPU = &vmletv1.CPU{Cores: 4}
		}, want: []string{"vcpus=4 mq=false", "Queues:1"}},
		{name: "multiqueue capped at QEMU's limit", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.CPU = &vmletv1.CPU{Sockets: 2, Cores: 16}
			v.Spec.Domain.Devices.NetworkInterfaceMultiQueue = &yes
		}, want: []string{"vcpus=16 mq=true", "Queues:16"}},
		{name: "hostname from spec", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Hostname = "web" },
			want: []string{"host=web"}},
		{name: "hostname from a dotted name", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Name = "db.prod" },
			want: []string{"host=db "}},
		{name: "long interface name gets a hashed NIC id", mutate: func(v *vmletv1.VirtualMachineInstance) {
			name := strings.Repeat("a", 40)
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{masqIface(name)}
			v.Spec.Networks = []vmletv1.Network{podNet(name)}
		}, want: []string{"ID:net-aaaaaaaaaaaaaaa-"}},

		{name: "e1000 model", mutate: func(v *vmletv1.VirtualMachineInstance) {
			i := masqIface("default")
			i.Model = "e1000"
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{i}
			v.Spec.Networks = []vmletv1.Network{podNet("default")}
		}, wantErr: ErrUnsupported, field: "spec.domain.devices.interfaces[0].model"},
		{name: "pci address", mutate: func(v *vmletv1.VirtualMachineInstance) {
			i := masqIface("default")
			i.PciAddress = "0000:81:01.1"
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{i}
			v.Spec.Networks = []vmletv1.Network{podNet("default")}
		}, wantErr: ErrUnsupported, field: "spec.domain.devices.interfaces[0].pciAddress"},
		{name: "non-pod network", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{masqIface("default")}
			v.Spec.Networks = []vmletv1.Network{{Name: "default"}}
		}, wantErr: ErrUnsupported, field: "spec.networks[0]"},
		{name: "interface without its network", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{masqIface("default")}
		}, wantErr: errInvalid, field: "spec.domain.devices.interfaces[0].name"},
		{name: "network without an interface", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{masqIface("default")}
			v.Spec.Networks = []vmletv1.Network{podNet("default"), podNet("other")}
		}, wantErr: errInvalid, field: "spec.networks[1].name"},
		{name: "ports on a bridge binding", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default", Ports: []vmletv1.Port{{Port: 80}}}}
			v.Spec.Networks = []vmletv1.Network{podNet("default")}
		}, wantErr: errInvalid, field: "spec.domain.devices.interfaces[0].ports"},
		{name: "port listed twice", mutate: func(v *vmletv1.VirtualMachineInstance) {
			i := masqIface("default")
			i.Ports = []vmletv1.Port{{Port: 80}, {Port: 80, Protocol: vmletv1.ProtocolTCP}}
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{i}
			v.Spec.Networks = []vmletv1.Network{podNet("default")}
		}, wantErr: errInvalid, field: "spec.domain.devices.interfaces[0].ports[1].port"},
		{name: "multicast MAC", mutate: func(v *vmletv1.VirtualMachineInstance) {
			i := masqIface("default")
			i.MacAddress = "01:00:5e:00:00:01"
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{i}
			v.Spec.Networks = []vmletv1.Network{podNet("default")}
		}, wantErr: errInvalid, field: "spec.domain.devices.interfaces[0].macAddress"},
		{name: "two pod networks", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{masqIface("a"), masqIface("b")}
			v.Spec.Networks = []vmletv1.Network{podNet("a"), podNet("b")}
		}, wantErr: errInvalid, field: "spec.networks[1]"},
		{name: "bad guest CIDR", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{masqIface("default")}
			n := podNet("default")
			n.Pod.VMNetworkCIDR = "10.0.2.0/31"
			v.Spec.Networks = []vmletv1.Network{n}
		}, wantErr: errInvalid, field: "spec.networks[0].pod.vmNetworkCIDR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			if tt.mutate != nil {
				tt.mutate(vmi)
			}
			n, err := NetworkSpec(vmi)
			if tt.wantErr != nil {
				checkFieldError(t, err, tt.wantErr, tt.field)
				return
			}
			if err != nil {
				t.Fatalf("NetworkSpec: %v", err)
			}
			got := fmtNetwork(n)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("network lacks %q:\n%s", w, got)
				}
			}
			nics, err := interfaces(vmi)
			if err != nil || fmt.Sprint(nics) != fmt.Sprint(n.NICs) {
				t.Errorf("DomainSpec's NICs = %+v, %v; want %+v", nics, err, n.NICs)
			}
		})
	}
}

// checkFieldError checks err is a *SpecError about field, unsupported or invalid as wanted.
func checkFieldError(t *testing.T, err, want error, field string) {
	t.Helper()
	var se *SpecError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a *SpecError", err)
	}
	if se.Field != field {
		t.Errorf("field = %q, want %q (%v)", se.Field, field, err)
	}
	if unsupported := errors.Is(err, ErrUnsupported); unsupported != errors.Is(want, ErrUnsupported) {
		t.Errorf("err = %v: unsupported = %v, want %v", err, unsupported, !unsupported)
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
		}, wantMAC: network.GenerateMAC("6f1c3c1e-7a55-4a4e-9d4f-2d1c9b3c0a11", "default").String(), queues: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			if tt.mutate != nil {
				tt.mutate(vmi)
			}
			n, err := NetworkSpec(vmi)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := network.PlanBindings(n.Spec, pod)
			if err != nil {
				t.Fatal(err)
			}
			nics, ns, err := ResolveNICs(n.NICs, plan, "/run/netns/vmlet-x")
			if err != nil {
				t.Fatal(err)
			}
			want := qemu.NIC{ID: "net-default", MAC: tt.wantMAC, TapName: "tap0", Queues: tt.queues}
			if len(nics) != 1 || fmt.Sprint(nics[0]) != fmt.Sprint(want) {
				t.Errorf("nics = %+v, want [%+v]", nics, want)
			}
			if len(ns) != 1 || ns["net-default"] != "/run/netns/vmlet-x" {
				t.Errorf("netns = %v", ns)
			}
			s := &qemu.Spec{Name: "r", MemoryMiB: 128, NICs: nics}
			if err := s.Validate(); err != nil {
				t.Errorf("resolved NICs are not a valid domain: %v", err)
			}
		})
	}
	n, err := NetworkSpec(baseVMI())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ResolveNICs(n.NICs, &network.Plan{}, "/x"); err == nil {
		t.Error("ResolveNICs accepts a plan without the planned interface")
	}
}
