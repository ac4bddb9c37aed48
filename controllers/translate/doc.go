// Package translate turns a VirtualMachineInstance and the facts of its node into everything
// the node agent wants for it, computed once per reconcile pass: the domain to start
// (qemu.Spec), the storage plan of its boot-time volumes and kernel, the network binding spec
// of its interfaces, and the hotplug sets (hotpluggable volumes, interfaces of secondary
// networks). Translate is the entry point and returns one Desired value.
//
// It owns KubeVirt's defaults and semantics as vmlet reproduces them: guest memory and CPU,
// boot order as libvirt assigns it (bootorder.go), volume sources and disks (storage.go),
// interfaces and networks (network.go), the annotations vmlet refuses (annotations.go).
//
// It is pure: it reads only its arguments (the VMI, NodeEnv, and the Secrets the reconciler
// read into Referenced), touches no host state and imports no Kubernetes client. What cannot
// be translated is a *SpecError naming the VMI's field; ErrUnsupported marks what vmlet
// cannot do (yet).
package translate
