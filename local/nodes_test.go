package local

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/nodeagent"
	"github.com/vmlet/vmlet/storage"
)

func TestPlanNodesSingle(t *testing.T) {
	cfg := Config{StateDir: "/s", RunRoot: "/run/vmlet", CgroupParent: "vmlet", NodeName: "host",
		Network: nodeagent.NetworkConfig{NetnsPath: "/run/netns/x", Subnet: netip.MustParsePrefix("198.19.201.0/24")}}
	for _, n := range []int{0, 1} {
		cfg.Nodes = n
		got, err := planNodes(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		st := cfg.StorageConfig
		st.Defaults("/s")
		want := []nodeSpec{{name: "host", runRoot: "/run/vmlet", cgroupParent: "vmlet", storage: st, network: cfg.Network, joinSystem: true}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Nodes %d: planNodes = %+v, want %+v (as before --nodes)", n, got, want)
		}
	}
}

func TestPlanNodesMulti(t *testing.T) {
	cfg := Config{StateDir: "/s", RunRoot: "/run/vmlet", CgroupParent: "vmlet", NodeName: "host", Nodes: 2,
		Network: nodeagent.NetworkConfig{ResolvConf: "/r"}}
	if got := cfg.NodeNames(); !reflect.DeepEqual(got, []string{"host-1", "host-2"}) {
		t.Fatalf("NodeNames = %v", got)
	}
	fabric, err := network.PlanFabric(cfg.fabricConfig(), cfg.NodeNames())
	if err != nil {
		t.Fatal(err)
	}
	got, err := planNodes(cfg, fabric)
	if err != nil {
		t.Fatal(err)
	}
	b := got[1]
	want := nodeSpec{name: "host-2", runRoot: "/run/vmlet/host-2", cgroupParent: "vmlet/host-2",
		storage: nodeagent.StorageConfig{ImageCacheDir: "/s/nodes/host-2/images", VolumeRoot: "/s/nodes/host-2/volumes"},
		network: nodeagent.NetworkConfig{Subnet: netip.MustParsePrefix("198.19.130.0/24"), NetnsPath: "/run/netns/vmlet-node-host-2",
			NetnsDir: "/run/vmlet-pods/host-2", ResolvConf: "/r", NoMasquerade: true, Shared: "/run/netns/vmlet-fabric", Node: "host-2"}}
	if !reflect.DeepEqual(b, want) || !got[0].joinSystem || got[0].runRoot != "/run/vmlet/host-1" {
		t.Errorf("planNodes =\n%+v\nwant node 2\n%+v", got, want)
	}
	cfg.StorageConfig = nodeagent.StorageConfig{ImageCacheDir: "/img", VolumeRoot: "/vol"}
	cfg.Network.NetnsDir = "/pods"
	got, _ = planNodes(cfg, fabric)
	if st, nw := got[0].storage, got[0].network; st.ImageCacheDir != "/img/host-1" || st.VolumeRoot != "/vol/host-1" || nw.NetnsDir != "/pods/host-1" {
		t.Errorf("explicit folders: %+v %+v, want a subfolder per node", st, nw)
	}
	// --claim: the machine's, the same path on every node, marked shared; the flags' map stays.
	cfg.Claims = map[string]storage.Claim{"data": {Path: "/srv/data", CapacityBytes: 1 << 20}}
	got, _ = planNodes(cfg, fabric)
	for _, n := range got {
		if c := n.storage.Claims["data"]; c != (storage.Claim{Path: "/srv/data", CapacityBytes: 1 << 20, Shared: true}) {
			t.Errorf("node %s claim %+v, want /srv/data shared", n.name, c)
		}
	}
	if cfg.Claims["data"].Shared {
		t.Error("planNodes changed the configuration's claims")
	}
	cfg.Network.Subnet6 = network.DefaultNodeSubnet6
	if _, err := planNodes(cfg, fabric); !errors.Is(err, nodeagent.ErrBadFlag) {
		t.Errorf("IPv6 with 2 nodes: %v, want ErrBadFlag", err)
	}
}
