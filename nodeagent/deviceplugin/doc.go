// Package deviceplugin is the node agent's kubelet device plugin (API
// k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1, gRPC over unix sockets in the kubelet's
// device-plugins folder): it advertises the device nodes a launcher may need as extended
// resources, as KubeVirt's virt-handler advertises devices.kubevirt.io/{kvm,tun,vhost-net}:
//
//	devices.vmlet.dev/kvm        /dev/kvm        only where KVM is usable (qemu/accel's honest probe)
//	devices.vmlet.dev/tun        /dev/net/tun    where it is the tun char device (10:200)
//	devices.vmlet.dev/vhost-net  /dev/vhost-net  where it is the vhost-net char device (10:238)
//
// The names are launcherpod's (ResourceKVM, ResourceTun, ResourceVhostNet): the cluster
// controller requests them in the launcher pod's limits, the kube-scheduler places the pod only
// on a node that advertises them ("Insufficient devices.vmlet.dev/kvm" otherwise) and the kubelet
// puts the device node into the container (and into runc's device rules). vmlet's eBPF program
// (package devices) then still narrows the container's access to exactly what its VM needs.
//
// A device node is shared by any number of VMs, so each resource is Count (default 1000)
// interchangeable devices ("0".."999"): Count pods per node can use it at once. Allocate hands
// every container the one node, read-write (no mknod), at the same path as on the host.
//
// "/dev/kvm exists" is not the KVM test: on nested-PVM hosts (kvm_pvm) KVM_CREATE_VM succeeds and
// real guests still fail, so kvm is advertised only when accel.Decide says KVM (Select takes that
// decision, not the device's existence). A KVM-only VMI then stays Pending there.
//
// Pure: Select (which resources from which probed facts), DeviceIDs, Allocate. Host: Probe
// (devices.Probe), Manager (the gRPC servers, one socket per resource, registration with
// kubelet.sock, and re-registration when the kubelet restarts: the kubelet deletes every plugin
// socket in its folder when it starts, so the Manager watches the folder with inotify and, as a
// fallback, checks its sockets every Resync; device health follows the device node's presence).
// Manager.Check is the agent's readiness check that every resource is registered.
package deviceplugin
