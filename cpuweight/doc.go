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
// <mount>/<parent> (parent is the node's --cgroup-parent, "vmlet"), on cgroup v1:
//
//	./                 NodeShares (the node's CPUs × 1024, as the kubelet's kubepods)
//	system/            SystemShares: the agent and local mode's etcd and kube-apiserver
//	launchers/         LauncherShares: every vmlet-launcher process
//	vmlet-<id>/        PlanVM(request).Shares: the VM's QEMU, main loop and I/O threads
//	vmlet-<id>/vcpus/  VCPUShares (the minimum): its vCPU threads
//
// The VM groups share the CPU in proportion to their requests, as pods do, and within a VM
// QEMU's main loop and I/O threads (weight 1024 each) run before its vCPUs whenever they are
// runnable. The launchers sit apart from their guests in a group of their own: a launcher is
// mostly asleep, and when it wakes its group is not one that spinning vCPUs keep busy, so it
// runs at once instead of waiting for its VM's turn among all the VMs (with the launcher
// inside its VM's group, a busy guest delays its own launcher by one round of every VM). The
// system and launchers groups outweigh all VMs together, so the control plane is not starved
// by guests; weights are work-conserving: what they leave idle goes to the guests.
//
// On cgroup v1 the VM group is a folder of the cpu hierarchy of its own, created and removed
// with the VM (VM.Remove). The launcher is moved into launchers after it starts (cgroup.procs;
// a process cannot be started into a v1 cgroup) and its QEMU is born there; the agent then
// moves QEMU into the VM group and the vCPU threads into vcpus (Runtime.PlaceVCPUs in package
// process), so a starting guest runs at the launchers' weight until its first reconcile.
//
// On cgroup v2 (not on these machines; written from the kernel's cgroup-v2.rst, untested
// here) the VM group is the launcher's jail itself (the device-filter cgroup, package
// devices), which holds the launcher and QEMU; vcpus is a threaded child (cgroup.type
// "threaded" makes the jail a threaded domain, so that single threads may move, and the cpu
// controller is enabled in its subtree_control). There is no launchers group: moving the
// launcher out of its jail would take it out of its device filter. So on v2 the launcher runs
// before its own vCPUs but shares its VM's turn with them. Threads move one by one: v1
// `tasks`, v2 `cgroup.threads`.
//
// Who moves the vCPU threads: the node agent (root). The launcher runs unprivileged (uid 107,
// shared by all launchers) and reports QEMU's pid and thread ids (QMP query-cpus-fast); the
// agent moves QEMU only if it is a process of that launcher's jail, and only thread ids that
// are then threads of that VM's own group (VM.PlaceVCPUs checks its tasks), so a launcher
// cannot move another VM's threads or the agent's. Delegating the vcpus group to the
// launcher's uid instead would let any launcher (all share one uid) move any other launcher's
// threads into its own low-weight group.
package cpuweight
