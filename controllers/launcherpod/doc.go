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
// The launcher container is not privileged and gets no extra capabilities: the node agent
// grants devices (/dev/kvm, /dev/net/tun, disks) by replacing the device filter (eBPF) on the
// pod's cgroup, and it opens taps host-side in the pod's network namespace and passes their file
// descriptors to the launcher, so NET_ADMIN is not needed either. No service account token is
// mounted: the launcher never talks to the API server.
//
// Resources are guest memory plus vmlet's measured overhead (MemoryOverhead; see the comment
// there for the measurement and overhead_test.go to repeat it), not KubeVirt's fixed
// estimates: memory requests equal limits, so a VMI's pod is sized for its guest touching all of
// its RAM.
package launcherpod
