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
package podruntime
