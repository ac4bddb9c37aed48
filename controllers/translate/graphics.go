package translate

import (
	"path/filepath"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu"
)

// display is the VMI's display: none when spec.domain.devices.autoattachGraphicsDevice is
// false, else a VGA device with a VNC server on a unix socket (the default is true, as in
// KubeVirt). The launcher serves the socket at its own path (sockets/vnc.sock); the one here
// only satisfies the driver's checks, like the agent's and serial console's.
func display(vmi *vmletv1.VirtualMachineInstance, runDir string) *qemu.Graphics {
	if a := vmi.Spec.Domain.Devices.AutoattachGraphicsDevice; a != nil && !*a {
		return nil
	}
	return &qemu.Graphics{Socket: filepath.Join(runDir, "vnc.sock")}
}
