package main

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/migrationca"

	"github.com/vmlet/vmlet/pki"
)

// agentMigration is what the node needs to send and receive live migrations: its address
// (--migration-address; the DaemonSet passes the agent pod's IP, where its relays listen) and
// its certificate from the cluster's migration CA, which vmlet controller keeps (migrationca)
// and which is read on the first migration (the controller may start after the agent). No
// address: the node takes no part in migrations.
func agentMigration(cfg *rest.Config, o agentOptions, log logr.Logger) (netip.Addr, *controllers.NodeCreds, error) {
	if o.migrationAddress == "" {
		log.Info("no --migration-address: this node neither sends nor receives live migrations")
		return netip.Addr{}, nil, nil
	}
	addr, err := netip.ParseAddr(o.migrationAddress)
	if err != nil {
		return netip.Addr{}, nil, fmt.Errorf("--migration-address %q: %w: want an IP address", o.migrationAddress, err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return netip.Addr{}, nil, fmt.Errorf("migration ca: %w", err)
	}
	return addr, &controllers.NodeCreds{
		ReadCA: func(ctx context.Context) (*pki.CA, error) { return migrationca.ReadCA(ctx, c) },
		Node:   pki.Node{Name: o.nodeName, Addrs: []netip.Addr{addr}},
	}, nil
}
