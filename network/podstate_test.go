package network

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParseResolvConf(t *testing.T) {
	d, err := ParseResolvConf(strings.NewReader(`# generated
domain example.org
search ns1.svc.cluster.local svc.cluster.local cluster.local
nameserver 127.0.0.53
nameserver 10.96.0.10
nameserver fe80::1%eth0
nameserver fd00::10
nameserver not-an-ip
options ndots:5
`))
	must(t, err)
	if want := []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00::10")}; !slices.Equal(d.Servers, want) {
		t.Errorf("servers %v, want %v (loopback, zoned and bad ones dropped)", d.Servers, want)
	}
	if want := []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local"}; !slices.Equal(d.Search, want) {
		t.Errorf("search %v, want %v", d.Search, want)
	}
	d, err = ParseResolvConf(strings.NewReader("domain example.org\n"))
	if err != nil || !slices.Equal(d.Search, []string{"example.org"}) {
		t.Errorf("domain only: %v, %v", d, err)
	}
}

func TestAliases(t *testing.T) {
	for _, pi := range []PodInterface{podEth0, {Name: "eth0", MAC: podEth0.MAC, MTU: 9000,
		Addr6: netip.MustParsePrefix("fd00::5/64"), Gateway6: netip.MustParseAddr("fd00::1")}} {
		a := bridgeAlias(pi)
		if len(a) > 255 {
			t.Errorf("alias too long: %d", len(a))
		}
		got, ok := parseBridgeAlias("eth0", a)
		if !ok || fmt.Sprint(got) != fmt.Sprint(pi) {
			t.Errorf("bridge alias %q -> %+v, %v; want %+v", a, got, ok, pi)
		}
	}
	for _, s := range []string{"", "vmlet-bridge", "vmlet-bridge mac=zz", "vmlet-bridgex mac=02:00:00:00:00:01"} {
		if _, ok := parseBridgeAlias("eth0", s); ok {
			t.Errorf("parseBridgeAlias(%q) accepted", s)
		}
	}
	p := podPlan(NodeConfig{Subnet: DefaultNodeSubnet}, "pod-1", netip.MustParseAddr("198.19.118.9"))
	v, ok := parsePodAlias(podAlias(p))
	if !ok || v.id != "pod-1" || v.addr != p.Addr || v.ifname != "" || v.hostName() != p.HostVeth {
		t.Errorf("pod alias round trip: %+v %v", v, ok)
	}
	sec := secondaryPlan(NodeConfig{Subnet: DefaultNodeSubnet}, "pod-1", "pod0123456789a", netip.MustParseAddr("198.19.118.10"))
	v, ok = parsePodAlias(podAlias(sec))
	if !ok || v.id != "pod-1" || v.addr != sec.Addr || v.ifname != "pod0123456789a" || v.hostName() != sec.HostVeth || sec.HostVeth == p.HostVeth {
		t.Errorf("secondary pod alias round trip: %+v %v (host veth %s)", v, ok, sec.HostVeth)
	}
	seg := secondaryPlan(NodeConfig{Subnet: DefaultSegmentSubnet}, "pod-1", "pod0123456789a", netip.MustParseAddr("198.19.119.10"))
	seg.HostVeth, seg.Node = segmentVethName("pod-1", "pod0123456789a", "node-a"), "node-a"
	v, ok = parsePodAlias(podAlias(seg))
	if !ok || v.id != "pod-1" || v.addr != seg.Addr || v.ifname != "pod0123456789a" || v.node != "node-a" || v.hostName() != seg.HostVeth || seg.HostVeth == sec.HostVeth {
		t.Errorf("segment pod alias round trip: %+v %v (host veth %s)", v, ok, seg.HostVeth)
	}
	for _, s := range []string{"vmlet-pod x", "vmlet-pod x 198.19.118.1/24 a b c"} {
		if _, ok := parsePodAlias(s); ok {
			t.Errorf("malformed pod alias %q accepted", s)
		}
	}
	if got := lastAddr(netip.MustParsePrefix("198.19.118.0/24")); got.String() != "198.19.118.255" {
		t.Errorf("lastAddr = %s", got)
	}
}
