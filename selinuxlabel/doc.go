// Package selinuxlabel decides and writes the SELinux labels of what a VM's launcher may touch,
// as KubeVirt's virt-handler does for virt-launcher: the node agent prepares a VM's files as
// root, and on an enforcing host a confined launcher (its process label, e.g.
// system_u:system_r:container_t:s0:c12,c34) can open only files whose label its policy allows
// at its MCS level. It is a host package: plain paths and strings, no Kubernetes types.
//
// Plan is pure: given the launcher's context and the VM's files by kind, it says which path
// gets which file context:
//   - the VM's own files (its storage folder, qcow2 overlays, empty disks, cloud-init ISOs, its
//     run folder and sockets): system_u:object_r:<FileType>:<launcher level>, e.g.
//     container_file_t:s0:c12,c34, so that only a process at that level (this VM's launcher,
//     or its migration target given the same level) opens them;
//   - shared read-only content (containerDisk bases and kernels in the node's image cache, and
//     the kernel/initrd hard links to it): system_u:object_r:<SharedType>:s0, no categories,
//     so that every VM reads them and none writes them;
//   - host files the VM is given (hostDisks, claims, a claim an ephemeral overlay reads): the
//     VM's context, and their previous label is restored when the VM is gone.
//
// Apply writes a plan with lsetxattr(2) ("security.selinux"), never following a symlink (a path
// that is one is refused, ErrSymlink), after recording each path's previous label in a journal
// file; Restore puts back the previous labels of host files (removing the attribute where
// there was none) and leaves the rest: the VM's folders are removed with the VM, and shared
// content stays readable for the other VMs.
//
// Process labels (the launcher's exec label, reading /proc/PID/attr/current) work only where
// SELinux is enabled: every such call is gated on selinux.GetEnabled() and returns ErrDisabled
// otherwise, without touching /proc (the kernel answers EINVAL there). File labels need no
// enabled SELinux: root can write the xattr on any filesystem with security xattrs, which is
// how a host with SELinux disabled can still be tested (the agent's "always" relabel mode).
//
// Equivalent to: chcon -h system_u:object_r:container_file_t:s0:c1,c2 PATH (per planned path),
// and runcon for the launcher.
package selinuxlabel
