package network

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"slices"
	"testing"
)

// A lease plan crosses the hand-over socket as JSON: it must come back the same.
func TestLeasePlanJSON(t *testing.T) {
	spec := masqSpec("vm-json")
	plan, err := PlanBindings(spec, dualStackPod())
	if err != nil {
		t.Fatal(err)
	}
	lp := plan.Interfaces[0].LeasePlan()
	if lp.DHCP6 == nil || lp.RA == nil {
		t.Fatalf("dual-stack lease plan %+v", lp)
	}
	b, err := json.Marshal(lp)
	if err != nil {
		t.Fatal(err)
	}
	var back LeasePlan
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, lp) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, lp)
	}
}

// Status addresses come from the leases that match an interface's plan, per family.
func TestInterfaceStatuses(t *testing.T) {
	plan, err := PlanBindings(masqSpec("vm-st"), dualStackPod())
	if err != nil {
		t.Fatal(err)
	}
	ip := plan.Interfaces[0]
	if st := InterfaceStatuses(plan, nil); len(st) != 1 || st[0].IPs != nil {
		t.Fatalf("no leases: %+v", st)
	}
	v4 := Lease{Interface: ip.Name, Addr: ip.DHCP.ClientAddr}
	v6 := Lease{Interface: ip.Name, Addr: ip.DHCP6.ClientAddr}
	other := Lease{Interface: "other", Addr: ip.DHCP.ClientAddr}
	st := InterfaceStatuses(plan, []Lease{other, v6, v4})
	want := []netip.Addr{ip.Pod.Addr.Addr(), ip.Pod.Addr6.Addr()}
	if !slices.Equal(st[0].IPs, want) || !slices.Equal(st[0].GuestIPs, []netip.Addr{v4.Addr.Addr(), v6.Addr.Addr()}) {
		t.Errorf("statuses %+v, want IPs %v", st, want)
	}
	if st := InterfaceStatuses(plan, []Lease{other}); st[0].IPs != nil {
		t.Errorf("another interface's lease counted: %+v", st)
	}
}

func dualStackPod() *PodState {
	pod := podEth0
	pod.Addr6 = netip.MustParsePrefix("fd00::5/64")
	return &PodState{Interfaces: []PodInterface{pod}}
}
