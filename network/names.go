package network

import (
	"crypto/sha256"
	"encoding/hex"
)

// Link and table names, as KubeVirt chooses them. A secondary network's pod interface gets a
// hashed name (KubeVirt's "pod" + 11 hex digits of the network name's SHA-256), so that its
// bridge ("k6t-" + the hash) and tap ("tap" + the hash) fit IFNAMSIZ and never depend on the
// interface's position in the spec: interfaces come and go while the others keep their names.

// SecondaryInterfaceName is the pod interface of secondary network name.
func SecondaryInterfaceName(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "pod" + hex.EncodeToString(sum[:])[:11]
}

// PodInterfaceOf is the pod interface network n attaches to: its PodInterface, else eth0 for
// the pod network and SecondaryInterfaceName for a secondary one.
func PodInterfaceOf(n Network) string {
	switch {
	case n.PodInterface != "":
		return n.PodInterface
	case n.Pod:
		return DefaultPodInterface
	default:
		return SecondaryInterfaceName(n.Name)
	}
}

// TapName is the guest tap of the binding on pod interface podIf: "tap0" for eth0, "tap" + the
// hash for a secondary interface.
func TapName(podIf string) string {
	if len(podIf) > 3 {
		return "tap" + podIf[3:]
	}
	return "tap-" + podIf
}

// bridgeName is the in-netns bridge of the binding on pod interface podIf: "k6t-eth0", or
// "k6t-" + the hash for a secondary interface.
func bridgeName(podIf string) string {
	if len(podIf) <= 11 {
		return "k6t-" + podIf
	}
	return "k6t-" + podIf[3:]
}

// tableName is the nftables table of interface name's binding: PodTableName for the pod
// network, "vmlet-NAME" for a secondary network (derived from the logical name, so that a
// binding found by its links' alias alone can be removed whole).
func tableName(n Network, name string) string {
	if n.Pod {
		return PodTableName
	}
	return PodTableName + "-" + name
}
