package launcherpod

import (
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/qemu/launcher"
)

// Labels and annotations of launcher pods.
const (
	// LabelVMIUID carries the VMI's UID on its launcher pod: the one way to find the pod of a
	// VMI (names are generated).
	LabelVMIUID = "vmlet.dev/vmi-uid"
	// LabelVMI carries the VMI's name when it is a valid label value (at most 63 characters).
	LabelVMI = "vmlet.dev/vmi"
	// LabelAppName is app.kubernetes.io/name; its value is AppName on every launcher pod.
	LabelAppName = "app.kubernetes.io/name"
	// AppName is the value of LabelAppName: the label selector of the controller's pod cache.
	AppName = "vmlet-launcher"
	// AnnotVMIName carries the VMI's name whatever its length.
	AnnotVMIName = "vmlet.dev/vmi-name"
	// LabelMigrationUID carries, on a migration target's launcher pod, the UID of the
	// VirtualMachineInstanceMigration it was made for (package migration's TargetPods).
	LabelMigrationUID = "vmlet.dev/migration-uid"
	// LabelMigrationRole says what a migration's launcher pod is: MigrationRoleTarget. A pod
	// without it is a VMI's own launcher pod, or a target that became it (the target's agent
	// took the VMI over, and the pod keeps its labels).
	LabelMigrationRole = "vmlet.dev/migration-role"
	// MigrationRoleTarget is LabelMigrationRole's value on a migration target's pod.
	MigrationRoleTarget = "target"
)

// MigrationTarget is the UID of the migration the pod was made for as its target (labels
// LabelMigrationRole and LabelMigrationUID); "" when it is no migration target.
func MigrationTarget(pod *corev1.Pod) types.UID {
	if pod.Labels[LabelMigrationRole] != MigrationRoleTarget {
		return ""
	}
	return types.UID(pod.Labels[LabelMigrationUID])
}

// Node labels the pod selects on. They are the node agent heartbeat's labels
// (controllers.LabelSchedulable, controllers.LabelKVM), repeated here so that this package does
// not depend on package controllers; a test checks that they stay equal.
const (
	NodeLabelSchedulable = "vmlet.dev/schedulable"
	NodeLabelKVM         = "vmlet.dev/kvm"
)

// Extended resources of the node agent's device plugin (nodeagent/deviceplugin), requested in
// the launcher container's limits (DeviceLimits): the kubelet puts the device node into the
// container, and the kube-scheduler places the pod only on a node that advertises them (KubeVirt's
// devices.kubevirt.io/kvm, tun and vhost-net).
const (
	ResourceKVM      = "devices.vmlet.dev/kvm"
	ResourceTun      = "devices.vmlet.dev/tun"
	ResourceVhostNet = "devices.vmlet.dev/vhost-net"
)

// The launcher container and its file system.
const (
	// ContainerName is the name of the pod's only container.
	ContainerName = "launcher"
	// Binary is the launcher executable inside the image.
	Binary = "/usr/bin/vmlet-launcher"
	// RunVolume is the name of the pod volume holding the launcher's run folder: the node's
	// HostRunDir, mounted at the same path inside the container (its --run-dir), because the
	// domain spec the agent sends names sockets and logs in it by their node paths, and QEMU
	// in the container opens them (as for the storage folders).
	RunVolume = "launcher-run"
	// StorageVolume is the name of the pod volume holding the VMI's storage folder.
	StorageVolume = "vmi-storage"
	// ImageCacheVolume is the name of the (read-only) image cache volume, when mounted.
	ImageCacheVolume = "image-cache"
)

// Defaults of Options and of the `vmlet controller` flags.
const (
	DefaultImage        = "ghcr.io/vmlet/vmlet-launcher:dev"
	DefaultLauncherRoot = "/var/run/vmlet/launchers"
	DefaultVolumeRoot   = "/var/lib/vmlet/volumes"
	DefaultImageCache   = "/var/lib/vmlet/images"
	// DefaultRunAsUser and DefaultRunAsGroup are the launcher's user: KubeVirt's qemu (107).
	DefaultRunAsUser  = 107
	DefaultRunAsGroup = 107
	// DefaultGracePeriod is a VMI's termination grace period when it sets none (KubeVirt's).
	DefaultGracePeriod = 30 * time.Second
	// GraceMargin is added to the VMI's grace period for the pod's: the launcher gets the VMI's
	// grace period to shut the guest down, then needs a little longer to stop QEMU and exit
	// before the kubelet kills it.
	GraceMargin = 15 * time.Second
	// MaxGracePeriod bounds the grace period taken from a VMI (the API allows up to 86400 s).
	MaxGracePeriod = 24 * time.Hour
)

// HostRunDir is the VMI's launcher run folder on the node, mounted at the same path in the pod.
func HostRunDir(launcherRoot string, uid types.UID) string {
	return filepath.Join(launcherRoot, string(uid))
}

// HostSocket is the launcher's ready socket on the node; it appears when the launcher serves
// (after it renamed launcher.sock.starting).
func HostSocket(launcherRoot string, uid types.UID) string {
	return filepath.Join(HostRunDir(launcherRoot, uid), launcher.ReadySocket)
}

// HostVolumeDir is the VMI's storage folder on the node, mounted at the same path in the pod.
func HostVolumeDir(volumeRoot string, uid types.UID) string {
	return filepath.Join(volumeRoot, string(uid))
}

// MatchingVMI selects the launcher pods of the VMI with this UID (client.List option).
func MatchingVMI(uid types.UID) client.MatchingLabels {
	return client.MatchingLabels{LabelVMIUID: string(uid), LabelAppName: AppName}
}

// Labels are the labels of a VMI's launcher pod.
func Labels(name string, uid types.UID) map[string]string {
	l := map[string]string{LabelVMIUID: string(uid), LabelAppName: AppName}
	if len(validation.IsValidLabelValue(name)) == 0 {
		l[LabelVMI] = name
	}
	return l
}

// maxPrefix keeps generated pod names (prefix + 5 random characters) within 63 characters, so
// that they are valid host names as well.
const maxPrefix = 58

// GenerateName is the pod's metadata.generateName: vmlet-launcher-<vmi name, truncated>-.
func GenerateName(vmiName string) string {
	const head = AppName + "-"
	n := vmiName
	if room := maxPrefix - len(head) - 1; len(n) > room {
		n = n[:room]
	}
	for n != "" && (n[len(n)-1] == '-' || n[len(n)-1] == '.') {
		n = n[:len(n)-1]
	}
	return head + n + "-"
}
