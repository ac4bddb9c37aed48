// Package launcherpod builds the launcher pod of a VirtualMachineInstance in cluster mode: the
// pod the cluster controller (controllers/cluster) creates for every pending VMI and that
// kube-scheduler places. It is pure: Build turns a VMI and Options into a *corev1.Pod and
// Resources computes its memory and CPU; neither reads anything but its arguments.
//
// The pod is a CONTRACT with the node agent's pod runtime, which finds the pod by the label
// LabelVMIUID, waits for the launcher's ready socket at HostSocket(launcherRoot, uid) on the
// node (the launcher binds launcher.sock.starting in its run folder and renames it to
// launcher.sock when it serves), and prepares the VMI's storage in HostVolumeDir(volumeRoot,
// uid), which the pod mounts at the same path so that the disk paths the agent computes (host
// paths) are valid inside the container too. Everything the agent relies on is an exported
// constant or function here.
//
// Claims (claims.go): the cluster controller resolves each persistentVolumeClaim, dataVolume
// (the claim of the same name, as KubeVirt's DataVolume owns one) and ephemeral volume through
// the API (ResolveClaim: the claim must be Bound, its PersistentVolume a local or hostPath one)
// before it makes the pod; until then the VMI waits Pending with KubeVirt's reasons
// (FailedPvcNotFound, PVCNotReady) or vmlet's PVCNotSupported. The pod mounts a Filesystem
// claim AT ITS VOLUME'S NODE PATH and maps a Block claim's device at the local volume's device
// path, the same convention as the storage folder: the node agent prepares disk.img (sparse,
// KubeVirt's size) on the node, QEMU opens the same path in the container, and no plugin
// layout of the kubelet (/var/lib/kubelet/pods/<uid>/volumes/...) or of the container runtime
// is relied on. The cost: only node-local volume types (local, hostPath) are supported, their
// paths must stay clear of the pod's other mounts, and a WaitForFirstConsumer claim (bound only
// once a pod is scheduled) is not (it stays PVCNotReady). The resolved claims are recorded in
// the pod's AnnotClaims, which the agent reads (PodClaims).
//
// Hot-plugged claims (attachment.go): a pod's mounts are fixed when it is made, so each
// hotpluggable claim volume of a running VMI gets an attachment pod (BuildAttachment, KubeVirt's
// hp-volume pod) pinned to the VMI's node, mounting the claim the same way and recording it in
// its own AnnotClaims; it runs the launcher binary with HoldFlag. The agent prepares and opens
// the disk on the node and hands the files to the launcher: the launcher's container never
// mounts it.
//
// Devices the kubelet way: the container's limits ask for the node agent's device plugin
// resources (DeviceLimits: ResourceKVM unless emulation is allowed, ResourceTun when the VMI has
// an interface), so the kube-scheduler places the pod only where the node has them and the
// kubelet creates the device nodes in the container (and in the runtime's device rules).
//
// The launcher container is not privileged and gets no extra capabilities: the node agent
// narrows the devices it may open (/dev/kvm, /dev/net/tun, disks) to exactly what its VM needs
// by replacing the device filter (eBPF) on the pod's cgroup, and it opens taps host-side in the
// pod's network namespace and passes their file descriptors to the launcher, so NET_ADMIN is
// not needed either. No service account token is mounted: the launcher never talks to the API
// server.
//
// Resources are guest memory plus vmlet's measured overhead (MemoryOverhead; see the comment
// there for the measurement and overhead_test.go to repeat it), not KubeVirt's fixed
// estimates: memory requests equal limits, so a VMI's pod is sized for its guest touching all of
// its RAM.
//
// CPU: the launcher container requests CPURequest (spec.domain.resources.requests.cpu, else
// CPUPerVCPU per vCPU) and is limited only when the VMI sets resources.limits.cpu, so the pod
// is Burstable unless the VMI asks for Guaranteed (cpu and memory limits equal to requests).
// What the request gives is the kubelet's, not vmlet's: the pod's cgroup gets cpu.shares =
// milli × 1024 / 1000 (at least 2; on cgroup v2 cpu.weight = 1 + (shares−2) × 9999 / 262142),
// e.g. 102 shares (weight 4) for a 1-vCPU VMI with no request, under kubepods (or
// kubepods/burstable), whose weight is the node's allocatable CPU. So under contention each VM
// gets CPU in proportion to its request against the other pods, and all of it when they are
// idle. Inside the pod the launcher, QEMU's main loop and its vCPU threads share that one
// container cgroup as equals: unlike local mode (package cpuweight: vCPUs in a low-weight
// child), cluster mode does not split the container's threads, because the container's
// cgroup is the container runtime's. A guest's vCPUs can therefore delay its own launcher, not
// other pods beyond their requests.
//
// The node agent DaemonSet (config/agent) runs in kubepods too, so its CPU request is its
// only weight against guests: it requests 500m (512 shares, as five 1-vCPU VMIs), which keeps
// it responsive when every guest spins, and has no CPU limit (CFS throttling would stall
// reconciles while CPUs are idle). Its priorityClassName system-node-critical keeps it from
// being preempted or evicted before guests under node pressure; priority does not change CPU
// weight. For more, reserve CPU for the system with the kubelet's --kube-reserved or
// --system-reserved and run the agent as a host service outside kubepods.
package launcherpod
