// Package process is the node agent's process runtime for launchers (local mode): each VMI's
// vmlet-launcher runs as a child process in a fresh cgroup-v2 "jail" carrying a vmlet eBPF device
// filter, with a private run folder for its sockets and logs.
//
// Launchers outlive the agent (their own session, no parent-death signal), so an agent that is
// killed and restarted re-adopts them from their run folders: the pid file, the ready socket and
// the cgroup tell what runs. When a launcher exits, its exit is read from the process (when the
// agent is its parent) or, after a restart, from the exit file the runtime writes when it reaps a
// child, or found as "gone without a trace" (killed).
//
// With a User (the node's --launcher-uid/--launcher-gid, 107:107 by default, KubeVirt's qemu
// user) the launcher — and QEMU, which inherits it — runs as that user with no supplementary
// groups (but /dev/kvm's where KVM is used), no capability in any set (the bounding set is
// emptied on the thread that forks it) and no_new_privs. It owns its run folder (0700); the
// agent's own files there (pid, exit, log) stay root's. Whatever else it needs (disks, taps)
// the agent, which stays root, prepares for it.
//
// With CPU weights (Runtime.CPU, package cpuweight) each launcher's VM gets a CPU group weighted
// as the kubelet weighs a pod with its CPU request (Spec.CPUMilli), created before the launcher
// starts and removed by Remove. On cgroup v1 the launcher joins the node's launchers group
// right after it starts; PlaceVCPUs, which the agent calls once QEMU runs, moves QEMU into the
// VM's group and its vCPU threads into the low-weight vcpus child, checking that both are that
// launcher's. A launcher found running without a group (an agent without weights started it)
// gets one on the next Ensure.
//
// The package takes plain strings and structs; it imports no Kubernetes types.
package process
