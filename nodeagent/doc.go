// Package nodeagent wires a vmlet node agent into a controller-runtime manager: the node probe
// and heartbeat, the node's storage (image cache, per-VMI volume folders, claims), its pod
// network and the VMI reconciler with a launcher runtime. `vmlet local` and `vmlet agent` both
// use it, so the single-machine stack and a cluster node run the same agent.
//
// Storage: images are pulled into an OCI image cache (StorageConfig.ImageCacheDir); each VMI's
// overlays, empty disks and cloud-init ISOs live in VolumeRoot/<uid> until the VMI is deleted.
// Without PersistentVolumes, `--claim NAME=PATH` says which folder (with disk.img) or block
// device a claim name means, `--host-disk-root` which folder hostDisks may use, and
// `--image REF=SOURCE` where an image reference is pulled from (e.g. an OCI layout on disk).
//
// Network: with NetworkConfig vmlet is the node's CNI (network.Node: a node bridge, NAT, one
// netns + veth per launcher); with Config.Pods the launchers' network namespaces come from
// elsewhere (launcher pods whose CNI made them).
//
// Node status: the heartbeat (Config.HeartbeatInterval) publishes the node's KVM/TCG labels,
// the host CPU's model name, the CPU model VMIs get by default, the node's QEMU version (when
// the node has a QEMU of its own), its interval and where its metrics are served. Health:
// Agent.LaunchersCheck is the readiness check that every Running VMI's launcher answers.
package nodeagent
