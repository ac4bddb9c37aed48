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
	id, addr, ok := parsePodAlias(podAlias(p))
	if !ok || id != "pod-1" || addr != p.Addr {
		t.Errorf("pod alias round trip: %q %v %v", id, addr, ok)
	}
	if _, _, ok := parsePodAlias("vmlet-pod x"); ok {
		t.Error("truncated pod alias accepted")
	}
	if got := lastAddr(netip.MustParsePrefix("198.19.118.0/24")); got.String() != "198.19.118.255" {
		t.Errorf("lastAddr = %s", got)
	}
}
