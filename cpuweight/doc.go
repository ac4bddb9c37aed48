// Package cpuweight gives each VM's cgroup a CPU weight as the kubelet gives a pod's, and keeps
// QEMU's vCPU threads below the launcher, QEMU's own main and I/O threads, the node agent and
// (in local mode) the control plane. No Kubernetes types: callers pass milli-CPUs.
//
// Pure (any OS): MilliCPUToShares and SharesToWeight (the kubelet's and runc's arithmetic),
// PlanVM, and the mountinfo parsing that finds the cpu controller.
//
// Kernel (_linux.go, root): Find picks the hierarchy that has the cpu controller — a cgroup-v1
// `cpu` mount on hybrid hosts (like these machines: /sys/fs/cgroup/cpu), else the cgroup2 mount
// when its cgroup.controllers lists cpu — found by filesystem type, never by path. Layout under
// <mount>/<parent> (parent is the node's --cgroup-parent, "vmlet"):
//
//	./                 NodeShares (the node's CPUs × 1024, as the kubelet's kubepods)
//	system/            SystemShares: the agent and local mode's etcd and kube-apiserver
//	vmlet-<id>/        PlanVM(request).Shares: the launcher, QEMU's main loop and I/O threads
//	vmlet-<id>/vcpus/  VCPUShares (the minimum): QEMU's vCPU threads
//
// Within a VM the launcher's and QEMU's non-vCPU threads (nice 0, weight 1024 each on v1) run
// before the vCPUs whenever they are runnable; between VMs the VM groups share the CPU in
// proportion to their requests, as pods do; the system group outweighs all VMs together, so the
// control plane is never starved by guests. Weights are work-conserving: an idle agent leaves
// its share to the guests.
//
// On cgroup v1 the VM group is a folder of the cpu hierarchy of its own, created and removed
// with the VM (VM.Remove); the launcher is moved in after it starts (cgroup.procs) and QEMU
// inherits it. On cgroup v2 the VM group is the launcher's jail itself (the device-filter
// cgroup, package devices); vcpus is a threaded child (cgroup.type "threaded", which makes the
// jail a threaded domain, so that single threads may move and the cpu controller is enabled
// in the jail's subtree_control), removed with the jail. Threads move one by one: v1 `tasks`,
// v2 `cgroup.threads`.
//
// Who moves the vCPU threads: the node agent (root). The launcher runs unprivileged (uid 107,
// shared by all launchers) and reports the thread ids from QMP query-cpus-fast; the agent moves
// only ids that are threads of that VM's own group (VM.PlaceVCPUs checks its tasks), so a
// launcher cannot move another VM's threads or the agent's. Delegating the vcpus group to the
// launcher's uid instead would let any launcher (all share one uid) move any other launcher's
// threads into its own low-weight group.
package cpuweight
