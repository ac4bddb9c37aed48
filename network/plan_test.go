package network

import (
	"errors"
	"flag"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the planner's output")

func mustMAC(s string) net.HardwareAddr {
	hw, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return hw
}

// podEth0 is a pod interface as the local-mode node network creates it.
var podEth0 = PodInterface{
	Name: "eth0", MAC: mustMAC("0a:58:c6:13:76:05"), MTU: 1450,
	Addr: netip.MustParsePrefix("198.19.118.5/24"), Gateway: netip.MustParseAddr("198.19.118.1"),
}

// TestPlanGolden compares whole plans (links, DHCP offer, nftables tables) with golden files.
func TestPlanGolden(t *testing.T) {
	dualStack := podEth0
	dualStack.Addr6 = netip.MustParsePrefix("fd76:6d6c:6574::5/64")
	dualStack.Gateway6 = netip.MustParseAddr("fd76:6d6c:6574::1")
	calico := podEth0 // gateway outside the pod's /32, as Calico does
	calico.Addr = netip.MustParsePrefix("10.244.1.7/32")
	calico.Gateway = netip.MustParseAddr("169.254.1.1")
	dns := DNS{Servers: []netip.Addr{netip.MustParseAddr("10.96.0.10")}, Search: []string{"default.svc.cluster.local", "svc.cluster.local"}}

	cases := []struct {
		name string
		spec func(*Spec)
		pod  PodInterface
	}{
		{"masquerade-ports", func(s *Spec) {}, podEth0},
		{"masquerade-all-ports", func(s *Spec) { s.Interfaces[0].Ports = nil }, podEth0},
		{"masquerade-multiqueue-custom-cidr", func(s *Spec) {
			s.VCPUs, s.MultiQueue = 8, true
			s.Interfaces[0].MAC = "52:54:00:aa:bb:cc"
			s.Networks[0].GuestCIDR = netip.MustParsePrefix("10.11.0.0/28")
			s.LeaseTime = time.Hour
		}, podEth0},
		{"masquerade-dual-stack", func(s *Spec) {}, dualStack},
		{"bridge", func(s *Spec) { s.Interfaces[0] = Interface{Name: "default", Binding: BindingBridge} }, podEth0},
		{"bridge-offlink-gateway", func(s *Spec) { s.Interfaces[0] = Interface{Name: "default", Binding: BindingBridge} }, calico},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := validSpec()
			spec.Hostname = "vm1"
			c.spec(spec)
			p, err := PlanBindings(spec, &PodState{Interfaces: []PodInterface{c.pod}, DNS: dns})
			if err != nil {
				t.Fatal(err)
			}
			golden(t, c.name, p.Render())
		})
	}
	t.Run("node", func(t *testing.T) {
		cfg, err := NodeConfig{}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "node", nodeTable(cfg).Render())
	})
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create): %v", err)
	}
	if got != string(want) {
		t.Errorf("plan differs from %s (run with -update after checking):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// TestPlanNoPodInterface: planning needs the pod interface; a bridge binding needs its address.
func TestPlanNoPodInterface(t *testing.T) {
	if _, err := PlanBindings(validSpec(), &PodState{}); !errors.Is(err, ErrNoPodAddress) {
		t.Errorf("no eth0: %v, want ErrNoPodAddress", err)
	}
	spec := validSpec()
	spec.Interfaces[0] = Interface{Name: "default", Binding: BindingBridge}
	noAddr := podEth0
	noAddr.Addr = netip.Prefix{}
	if _, err := PlanBindings(spec, &PodState{Interfaces: []PodInterface{noAddr}}); !errors.Is(err, ErrNoPodAddress) {
		t.Errorf("bridge without address: %v, want ErrNoPodAddress", err)
	}
}

// TestPlanCompiles: every planned table compiles to nftables expressions.
func TestPlanCompiles(t *testing.T) {
	for _, ifc := range []Interface{
		{Name: "default", Binding: BindingMasquerade, Ports: []Port{{Port: 80}, {Port: 53, Protocol: ProtocolUDP}}},
		{Name: "default", Binding: BindingMasquerade},
		{Name: "default", Binding: BindingBridge},
	} {
		spec := validSpec()
		spec.Interfaces[0] = ifc
		pod := podEth0
		pod.Addr6 = netip.MustParsePrefix("fd00::5/64")
		p, err := PlanBindings(spec, &PodState{Interfaces: []PodInterface{pod}})
		if err != nil {
			t.Fatal(err)
		}
		tbl := p.Interfaces[0].Table
		for _, c := range tbl.Chains {
			for _, r := range c.Rules {
				if _, err := compileRule(tbl.Family, r); err != nil {
					t.Errorf("%s: %v", r, err)
				}
			}
		}
	}
	if _, err := compileRule(FamilyInet, Rule{Daddr: netip.MustParsePrefix("10.0.0.1/32"), Action: ActionDNAT, To: netip.MustParseAddr("fd00::1")}); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("v4 rule with v6 target: %v, want ErrInvalidSpec", err)
	}
}

func TestPlanPod(t *testing.T) {
	cfg := NodeConfig{Subnet: netip.MustParsePrefix("198.19.118.0/29"), NetnsDir: "/run/test-netns"}
	var used []netip.Addr
	for i, want := range []string{"198.19.118.2/29", "198.19.118.3/29", "198.19.118.4/29", "198.19.118.5/29", "198.19.118.6/29"} {
		p, err := PlanPod(cfg, "pod"+string(rune('a'+i)), used)
		if err != nil || p.Addr.String() != want {
			t.Fatalf("pod %d: %v, %v; want %s", i, p.Addr, err, want)
		}
		used = append(used, p.Addr.Addr())
	}
	if _, err := PlanPod(cfg, "podf", used); !errors.Is(err, ErrSubnetExhausted) {
		t.Errorf("7th pod in a /29: %v, want ErrSubnetExhausted", err)
	}
	p, err := PlanPod(cfg, "0b5a7f9e-1c1d-4c7e-9a43-2f6f1d0c1a11", used[1:])
	if err != nil || p.Addr.String() != "198.19.118.2/29" || p.Gateway.String() != "198.19.118.1" {
		t.Errorf("freed address not reused: %+v, %v", p, err)
	}
	if p.NetnsPath != "/run/test-netns/vmlet-0b5a7f9e-1c1d-4c7e-9a43-2f6f1d0c1a11" || len(p.HostVeth) > 15 || !strings.HasPrefix(p.HostVeth, "vmh") {
		t.Errorf("names: %+v", p)
	}
	for _, id := range []string{"", "Pod", "a/b", "-a", strings.Repeat("a", 64)} {
		if _, err := PlanPod(cfg, id, nil); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("PlanPod(%q) = %v, want ErrInvalidSpec", id, err)
		}
	}
	for _, bad := range []NodeConfig{
		{Subnet: netip.MustParsePrefix("198.19.118.0/30")},
		{Subnet: netip.MustParsePrefix("198.19.118.1/24")},
		{Subnet: netip.MustParsePrefix("fd00::/64")},
		{Bridge: "a-very-long-bridge-name"},
		{MTU: 100},
		{NetnsDir: "relative"},
	} {
		if _, err := NewNode(bad); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("NewNode(%+v) = %v, want ErrInvalidSpec", bad, err)
		}
	}
}
