package network

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"
)

func TestPlanFabric(t *testing.T) {
	got, err := PlanFabric(FabricConfig{}, []string{"node-a", "node-b", "node-c"})
	if err != nil {
		t.Fatal(err)
	}
	gw := netip.MustParseAddr("198.19.128.1")
	node := func(name, addr, pods string, peers ...FabricRoute) FabricNode {
		return FabricNode{
			Name: name, NetnsPath: "/run/netns/vmlet-node-" + name, Addr: netip.MustParseAddr(addr),
			PodSubnet: netip.MustParsePrefix(pods), Gateway: gw, Link: FabricLink, Peers: peers, Fabric: "/run/netns/vmlet-fabric",
		}
	}
	route := func(dst, via string) FabricRoute {
		return FabricRoute{Dst: netip.MustParsePrefix(dst), Via: netip.MustParseAddr(via)}
	}
	want := []FabricNode{
		node("node-a", "198.19.128.2", "198.19.129.0/24", route("198.19.130.0/24", "198.19.128.3"), route("198.19.131.0/24", "198.19.128.4")),
		node("node-b", "198.19.128.3", "198.19.130.0/24", route("198.19.129.0/24", "198.19.128.2"), route("198.19.131.0/24", "198.19.128.4")),
		node("node-c", "198.19.128.4", "198.19.131.0/24", route("198.19.129.0/24", "198.19.128.2"), route("198.19.130.0/24", "198.19.128.3")),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("PlanFabric =\n%+v\nwant\n%+v", got, want)
	}
	if DefaultFabricSubnet.Overlaps(DefaultNodeSubnet) || DefaultSegmentSubnet.Overlaps(DefaultNodeSubnet) || DefaultSegmentSubnet.Overlaps(DefaultFabricSubnet) {
		t.Errorf("default subnets overlap: fabric %s, node %s, segment %s", DefaultFabricSubnet, DefaultNodeSubnet, DefaultSegmentSubnet)
	}
	if w := "table inet vmlet_fabric {\n\tchain postrouting {\n\t\ttype nat hook postrouting priority 100; policy accept;\n\t\tip saddr 198.19.128.0/17 ip daddr != 198.19.128.0/17 counter masquerade\n\t}\n}\n"; fabricTable(FabricConfig{Name: "vmlet", Subnet: DefaultFabricSubnet}).Render() != w {
		t.Errorf("fabric table =\n%s\nwant\n%s", fabricTable(FabricConfig{Name: "vmlet", Subnet: DefaultFabricSubnet}).Render(), w)
	}
}

func TestPlanFabricSmall(t *testing.T) {
	cfg := FabricConfig{NetnsDir: "/tmp/ns", Subnet: netip.MustParsePrefix("10.9.0.0/26"), PodBits: 28, Name: "t1"}
	got, err := PlanFabric(cfg, []string{"x", "y", "z"}) // 4 blocks of /28: link + 3 nodes
	if err != nil {
		t.Fatal(err)
	}
	if got[2].Addr != netip.MustParseAddr("10.9.0.4") || got[2].PodSubnet != netip.MustParsePrefix("10.9.0.48/28") || got[0].NetnsPath != "/tmp/ns/t1-node-x" {
		t.Errorf("plan = %+v", got)
	}
	if _, err := PlanFabric(cfg, []string{"a", "b", "c", "d"}); !errors.Is(err, ErrSubnetExhausted) {
		t.Errorf("4 nodes in a /26 of /28s: %v, want ErrSubnetExhausted", err)
	}
}

func TestPlanFabricInvalid(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg   FabricConfig
		nodes []string
	}{
		"long name":       {FabricConfig{Name: "toolongname"}, []string{"a"}},
		"upper name":      {FabricConfig{Name: "Vm"}, []string{"a"}},
		"ipv6 subnet":     {FabricConfig{Subnet: netip.MustParsePrefix("fd00::/64")}, []string{"a"}},
		"host bits":       {FabricConfig{Subnet: netip.MustParsePrefix("198.19.128.1/17")}, []string{"a"}},
		"pod bits short":  {FabricConfig{PodBits: 16}, []string{"a"}},
		"pod bits long":   {FabricConfig{PodBits: 30}, []string{"a"}},
		"relative dir":    {FabricConfig{NetnsDir: "run/netns"}, []string{"a"}},
		"relative uplink": {FabricConfig{UplinkNetns: "ns"}, []string{"a"}},
		"bad node":        {FabricConfig{}, []string{"Node_A"}},
		"duplicate node":  {FabricConfig{}, []string{"a", "a"}},
	} {
		if _, err := PlanFabric(tc.cfg, tc.nodes); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: %v, want ErrInvalidSpec", name, err)
		}
	}
}
