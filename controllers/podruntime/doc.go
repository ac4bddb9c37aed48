// Package podruntime is the node agent's launcher runtime in a cluster: launchers run in launcher
// pods that the cluster controller creates and a kubelet starts, so this runtime starts nothing.
// It finds each VMI's launcher through the pod's hostPath run folder
// (<LauncherRoot>/<vmi uid>/launcher.sock, the same layout as the process runtime's), learns
// the launcher's host PID from the socket's peer credentials (SO_PEERCRED translates it into
// the agent's PID namespace; the agent runs with hostPID), and reads how a launcher ended from
// its pod's container status. The launcher runs in its pod's PID namespace: the PIDs it
// reports (QEMU's) are mapped to the agent's namespace by HostPID (the NSpid of the launcher's
// children), so that status.launcher.pid names QEMU on the node.
//
// What the agent still does itself, as virt-handler does: it installs vmlet's eBPF device
// program on the launcher container's cgroup (replacing runc's while keeping runc's default
// rules), SIGTERMs the launcher for a graceful guest shutdown, kills it on teardown, and wires
// the VMI's bindings inside the pod's network namespace (/proc/<launcher pid>/ns/net), which
// the cluster's CNI made and removes with the pod.
//
// Claims (claims.go): the launcher pod's vmlet.dev/claims annotation says where each of the
// VMI's claims is; the pod mounts them at those node paths (see launcherpod), so the agent
// prepares them on the node like local mode's --claim folders and devices, before the launcher
// runs. It does not enter the pod's mount namespace for files; only a Block claim's device node,
// which the container runtime makes root's inside the container, is handed to the launcher's
// user through /proc/<pid>/root (resolved inside that root, devnodes_linux.go), as virt-handler
// does, right before the device program grants exactly that device. Claims hot-plugged into a
// running VMI come from its attachment pods on this node once they run (launcherpod.
// BuildAttachment); the agent opens their disks itself and hands the files to the launcher
// (controllers' grpcLauncher.HotplugDisk), so the launcher's container needs no mount of them.
// WatchExits wakes the VMI when an attachment pod starts or stops holding its claim.
package podruntime
