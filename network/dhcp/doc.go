// Package dhcp is the DHCP side of a pod network binding: a single-client DHCPv4 server, a
// stateful DHCPv6 server and IPv6 router advertisements, one set per bridge, each offering
// exactly one lease (a LeasePlan, planned by package network) to the VM's guest.
//
// Binding the server ports (67, 547) and opening the raw ICMPv6 socket take privileges, using
// them does not: ListenDHCP creates the sockets as root inside the pod's network namespace,
// bound to the bridge, and ServeLeasePlan serves them in any process and namespace. The node
// agent binds them and hands them with the plan to the VM's unprivileged launcher (SCM_RIGHTS),
// which serves them for as long as the VM runs, so an agent restart or upgrade never leaves a
// guest without its DHCP server (KubeVirt's virt-launcher likewise runs the guest's DHCP).
//
// The package links no netlink, nftables or Kubernetes code: the launcher imports it alone.
// Replies are computed by pure functions (dhcpReply, dhcp6Reply, raMessage), tested against
// the library's wire format; the servers against real clients in package network's tests.
package dhcp
