// Package network wires guest NICs to the pod network the way KubeVirt's bindings do, without
// libvirt: a pure plan and a thin, idempotent, self-reverting netlink/nftables apply. It takes
// plain Go structs; no Kubernetes types.
//
// It owns three things:
//
// Local-mode pod network (Node): when vmlet runs without a CNI it acts as one. Every launcher
// gets a netns (bind-mounted under NodeConfig.NetnsDir, /run/netns by default) with an "eth0"
// that is one end of a veth whose other end is a port of the node bridge (vmlet0). Pods get
// addresses from the node subnet (DefaultNodeSubnet, 198.19.118.0/24, see its doc for why),
// their default route points at the bridge, and an nftables table (inet vmlet_node)
// masquerades what leaves the subnet. The kernel is the only state: each pod's host veth
// carries "vmlet-pod ID ADDR" in its alias. PlanPod is the pure part, Node.CreatePod and
// Node.DeletePod apply it.
//
// Node fabric (several nodes on one machine, `vmlet local --nodes N`): PlanFabric is the pure
// part, EnsureFabric and RemoveFabric apply it. A fabric namespace (vmlet-fabric) holds a
// bridge; every node gets a namespace (vmlet-node-NAME) joined to it by a veth (fabric0) with
// an address on the link subnet and its own pod subnet (DefaultFabricSubnet, 198.19.128.0/17,
// cut into /24s), where an ordinary Node (NodeConfig.NetnsPath, NoMasquerade) builds its pod
// network. Nodes route each other's pod subnets without NAT; a veth from the fabric to the host
// (vmlet-fabric) is every node's default gateway and masquerades what leaves the fabric
// (table inet vmlet_fabric). ListenTCP and DialTCP make sockets inside a namespace.
//
// Bindings in the launcher's netns (Discover, PlanBindings, ApplyPlan, RemovePlan, or
// Attach which does all and starts DHCP):
//   - masquerade (KubeVirt's default): bridge k6t-eth0 with 10.0.2.1/24 and the guest's
//     multiqueue vnet_hdr tap; the guest leases 10.0.2.2; table inet vmlet masquerades its
//     egress to the pod address and DNATs the declared ports (all when none) from the pod
//     address, and from 127.0.0.1 inside the pod, to the guest.
//   - bridge: the pod interface joins k6t-eth0 with the tap, loses its address and its MAC
//     (the guest takes both: the MAC directly, the address by DHCP); table bridge vmlet keeps
//     DHCP on the guest's side of eth0. The original state is kept in eth0's alias, so plans
//     are reproducible and RemovePlan restores it.
//
// Secondary networks and NIC hotplug: a Network with an Attachment (KubeVirt's multus
// networks) is a second pod interface, which the CNI (Multus) adds to the pod in a cluster.
// In local mode vmlet is that CNI: Node.AddInterface adds one more veth from the launcher's
// netns to the node bridge, named SecondaryInterfaceName(network) ("pod" + a hash, as KubeVirt
// names them), with the next free address of the node subnet and no routes (the pod's default
// route stays on eth0); its host end's alias "vmlet-pod ID ADDR IFNAME" keeps the kernel the
// only IPAM state. Secondary networks take only the bridge binding: Attachment.AddInterface
// binds one while the VM runs (bridge "k6t-" + hash, tap "tap" + hash, table bridge
// "vmlet-NAME", a DHCP server offering the interface's address and no router), and
// Attachment.RemoveInterface unbinds it, also when an earlier agent made it (found by its
// links' "vmlet-binding NAME" alias); Node.RemoveInterface then deletes the veth. Names never
// depend on an interface's position, so adding or removing one leaves the others alone.
//
// Shared segment (several nodes on one machine): a Segment is one node's side of an L2 network
// that every node shares, a bridge (vmlet-shared) in a namespace they all reach (the fabric's),
// where Segment.AddInterface gives this node's pod one more interface as Node.AddInterface
// does on the node bridge, from DefaultSegmentSubnet (198.19.119.0/24). Host veths carry the
// node in their alias and name ("vmlet-pod ID ADDR IFNAME NODE"), so the pods of one VMI on
// two nodes each have their own; the second one gets the address the first has (and the
// MAC, derived from the pod id and interface), so a migrating guest keeps both. The bridge
// comes with the first interface and goes with the last; it has no address and routes nothing.
//
// DHCP (package dhcp): one server per binding, its socket created inside the launcher's
// netns and bound to the bridge; it offers exactly one address to exactly one MAC, with
// router, DNS and search domains (from the pod's resolv.conf or the spec), hostname, MTU and
// classless routes for off-link gateways. The plan of it is the interface's LeasePlan.
// Binding the ports and the raw ICMPv6 socket takes root (Attachment.ListenDHCP); serving
// them does not (dhcp.ServeLeasePlan): the node agent binds them and hands them with the plan
// to the VM's unprivileged launcher, which serves them for as long as the VM runs, whatever
// happens to the agent (AttachOptions.ServeDHCP serves them in the calling process instead:
// tests, tools). Attachment.Status and InterfaceStatuses turn the guest's leases into the
// addresses it is reachable at.
//
// QEMU gets the tap through OpenTap, which attaches one queue file per vCPU on a thread inside
// the launcher's netns; the files go to QEMU over SCM_RIGHTS (qemu.NIC.TapFDs). vhost is used
// only where /dev/vhost-net exists (VhostNetAvailable).
//
// Kernel calls that depend on the calling thread's namespace (tap creation, /proc/sys/net,
// sockets) run on a fresh locked OS thread switched into the target namespace that is never
// unlocked, so Go discards it afterwards (doInNetns). Links that vmlet creates carry an alias
// marking them as its own; a foreign link of the same name is reported as ErrNameCollision and
// never reused or deleted.
//
// IPv6: NodeConfig.Subnet6 makes the local pod network dual-stack (DefaultNodeSubnet6, a ULA
// /64; pods get the IPv6 address with the same host part as their IPv4 one, and the node
// masquerades IPv6 too). On a pod with a global IPv6 address the masquerade binding adds
// fd10:0:2::/120 (gateway ::1, guest ::2) and fe80::1 on the bridge, router advertisements
// from fe80::1 (dhcp.ServeRA: default route, managed flag, on-link prefix, MTU), a stateful
// DHCPv6 server for the guest's address (dhcp.ServeDHCPv6) and IPv6 DNAT/masquerade. The
// bridge binding is IPv4 only: a pod's IPv6 address stays on the pod interface, unused.
package network
