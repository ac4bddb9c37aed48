package translate

import (
	"fmt"
	"sort"
)

// unsupportedAnnotations are KubeVirt annotations that change how a VM is built, which vmlet
// does not implement. Running such a VMI without them would silently run another VM than the
// one asked for, so the VMI fails with reason Unsupported and a message naming the annotation.
var unsupportedAnnotations = map[string]string{
	// KubeVirt's hook sidecars rewrite the libvirt domain XML (onDefineDomain) or the
	// cloud-init data (preCloudInitIso) from extra containers in the launcher pod; vmlet has
	// neither libvirt XML nor sidecar containers. The SMBIOS example's
	// smbios.vm.kubevirt.io/* values are read only by such a sidecar.
	"hooks.kubevirt.io/hookSidecars": "hook sidecars (vmlet has no libvirt domain XML to hook)",
}

// checkAnnotations fails for the first (by name) unsupported annotation the VMI carries.
func checkAnnotations(annotations map[string]string) error {
	var names []string
	for k := range annotations {
		if _, bad := unsupportedAnnotations[k]; bad {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	return &SpecError{
		Field:  fmt.Sprintf("metadata.annotations[%s]", names[0]),
		Reason: unsupportedAnnotations[names[0]] + " are not supported",
		Err:    ErrUnsupported,
	}
}
