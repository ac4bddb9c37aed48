package deviceplugin

import "github.com/vmlet/vmlet/devices"

// Probe reads this node's Facts (devices.Probe: KVM by qemu/accel's rule, tun and vhost-net
// by their device numbers).
func Probe() Facts {
	c := devices.Probe()
	return Facts{KVM: c.KVM.KVMUsable(), Tun: c.Tun, VhostNet: c.VhostNet}
}
