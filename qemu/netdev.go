package qemu

import "strings"

// NIC JSON for netdev_add and device_add, shared by cold plug and hotplug.

// netdevArgs is the netdev_add argument for n. With tap fds, fdNames are the names the fds
// were registered under with getfd. vhost is off: vhost-net is not available everywhere (it
// is not on the CI machines) and the fd path must not depend on it.
func netdevArgs(n NIC, fdNames []string) map[string]any {
	a := map[string]any{"type": "tap", "id": netdevID(n.ID), "vhost": false}
	switch {
	case len(fdNames) == 1:
		a["fd"] = fdNames[0]
	case len(fdNames) > 1:
		a["fds"] = strings.Join(fdNames, ":")
	default:
		a["ifname"] = n.TapName
		a["script"] = "no"
		a["downscript"] = "no"
		if q := n.queues(); q > 1 {
			a["queues"] = q
		}
	}
	return a
}

// nicDeviceArgs is the device_add argument for n on root port port.
func nicDeviceArgs(n NIC, port int) map[string]any {
	a := map[string]any{
		"driver": "virtio-net-pci",
		"id":     n.ID,
		"netdev": netdevID(n.ID),
		"mac":    strings.ToLower(n.MAC),
		"bus":    rootPortID(port),
		"addr":   "0x0",
	}
	if q := n.queues(); q > 1 {
		a["mq"] = true
		a["vectors"] = 2*q + 2
	}
	if n.BootIndex > 0 {
		a["bootindex"] = n.BootIndex
	}
	return a
}
