// Package network wires guest NICs to the pod network (masquerade and bridge bindings, DHCP,
// NAT): a pure plan and a thin netlink/nftables apply. No Kubernetes types.
package network
