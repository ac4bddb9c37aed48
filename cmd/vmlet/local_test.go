package main

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/vmlet/vmlet/local"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/nodeagent"
)

// TestLocalNodesFlags: --nodes defaults to 1 (no fabric), takes its subnet from --fabric-subnet,
// and refuses 0, a per-node --node-subnet, and more nodes than the fabric subnet holds.
func TestLocalNodesFlags(t *testing.T) {
	parse := func(args ...string) (local.Config, error) {
		c := localCmd()
		c.SetArgs(args)
		if err := c.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		var cfg local.Config
		cfg.NodeName, _ = c.Flags().GetString("node-name")
		cfg.Nodes, _ = c.Flags().GetInt("nodes")
		cfg.Fabric.Name, _ = c.Flags().GetString("fabric-name")
		sub, _ := c.Flags().GetString("fabric-subnet")
		return cfg, localOptions{fabricSubnet: sub}.parseNodes(c, &cfg)
	}
	cfg, err := parse()
	if err != nil || cfg.Nodes != 1 || cfg.Fabric.Subnet.IsValid() {
		t.Errorf("defaults: %+v, %v; want 1 node, no fabric", cfg, err)
	}
	cfg, err = parse("--nodes", "3", "--node-name", "n", "--fabric-subnet", "198.19.64.0/20")
	if err != nil || cfg.Fabric.Subnet != netip.MustParsePrefix("198.19.64.0/20") || cfg.Fabric.Name != "vmlet" {
		t.Errorf("--nodes 3: %+v, %v", cfg.Fabric, err)
	}
	for _, args := range [][]string{{"--nodes", "0"}, {"--nodes", "2", "--node-subnet", "198.19.201.0/24"}} {
		if _, err := parse(args...); !errors.Is(err, nodeagent.ErrBadFlag) {
			t.Errorf("%v: %v, want ErrBadFlag", args, err)
		}
	}
	if _, err := parse("--nodes", "16", "--node-name", "n", "--fabric-subnet", "198.19.64.0/20"); !errors.Is(err, network.ErrSubnetExhausted) {
		t.Errorf("16 nodes in a /20: %v, want ErrSubnetExhausted", err)
	}
}
