package v1alpha1

// UnsupportedField is a kubevirt.io/v1 field that vmlet does not implement. hack/generate.sh
// declares each one in the CRD schema with a validation rule that always fails, so the API
// server rejects a manifest that sets it (HTTP 422, a Forbidden cause naming the field)
// whatever field validation the client asked for, instead of silently pruning it.
//
// +kubebuilder:object:generate=false
type UnsupportedField struct {
	// Parent is the JSON path of the object that holds the field in a VirtualMachineInstance,
	// "[]" marking list items, e.g. "spec.domain.devices.disks[]".
	Parent string
	// Name is the field's JSON name.
	Name string
	// Kind is the field's JSON kind in KubeVirt's schema: object, array, string, boolean,
	// integer or quantity.
	Kind string
}

// Kinds of unsupported fields.
const (
	KindObject   = "object"
	KindArray    = "array"
	KindString   = "string"
	KindBoolean  = "boolean"
	KindInteger  = "integer"
	KindQuantity = "quantity"
)

// UnsupportedMessage is the message of the validation error for an unsupported field.
const UnsupportedMessage = "not supported by vmlet (a kubevirt.io/v1 field vmlet does not implement): remove it"

// UnsupportedFields lists the kubevirt.io/v1 VirtualMachineInstance fields (KubeVirt commit
// d923fdb815cd) that vmlet rejects. Fields that are in neither the vmlet schema nor this list are
// unknown fields: pruned, or rejected with fieldValidation=Strict (see doc.go).
var UnsupportedFields = []UnsupportedField{
	{"spec", "priorityClassName", KindString},
	{"spec", "affinity", KindObject},
	{"spec", "schedulerName", KindString},
	{"spec", "serviceAccountName", KindString},
	{"spec", "topologySpreadConstraints", KindArray},
	{"spec", "startStrategy", KindString},
	{"spec", "livenessProbe", KindObject},
	{"spec", "readinessProbe", KindObject},
	{"spec", "dnsPolicy", KindString},
	{"spec", "dnsConfig", KindObject},
	{"spec", "accessCredentials", KindArray},
	{"spec", "architecture", KindString},
	{"spec", "resourceClaims", KindArray},
	{"spec", "utilityVolumes", KindArray},

	{"spec.domain", "clock", KindObject},
	{"spec.domain", "features", KindObject},
	{"spec.domain", "ioThreadsPolicy", KindString},
	{"spec.domain", "ioThreads", KindObject},
	{"spec.domain", "chassis", KindObject},
	{"spec.domain", "launchSecurity", KindObject},
	{"spec.domain", "rebootPolicy", KindString},

	{"spec.domain.cpu", "features", KindArray},
	{"spec.domain.cpu", "dedicatedCpuPlacement", KindBoolean},
	{"spec.domain.cpu", "numa", KindObject},
	{"spec.domain.cpu", "isolateEmulatorThread", KindBoolean},
	{"spec.domain.cpu", "realtime", KindObject},

	{"spec.domain.memory", "hugepages", KindObject},
	{"spec.domain.memory", "reservedOverhead", KindObject},

	{"spec.domain.firmware", "acpi", KindObject},
	{"spec.domain.firmware.bootloader.efi", "persistent", KindBoolean},

	{"spec.domain.devices", "useVirtioTransitional", KindBoolean},
	{"spec.domain.devices", "disableHotplug", KindBoolean},
	{"spec.domain.devices", "watchdog", KindObject},
	{"spec.domain.devices", "inputs", KindArray},
	{"spec.domain.devices", "logSerialConsole", KindBoolean},
	{"spec.domain.devices", "autoattachInputDevice", KindBoolean},
	{"spec.domain.devices", "autoattachVSOCK", KindBoolean},
	{"spec.domain.devices", "blockMultiQueue", KindBoolean},
	{"spec.domain.devices", "gpus", KindArray},
	{"spec.domain.devices", "downwardMetrics", KindObject},
	{"spec.domain.devices", "filesystems", KindArray},
	{"spec.domain.devices", "hostDevices", KindArray},
	{"spec.domain.devices", "clientPassthrough", KindObject},
	{"spec.domain.devices", "sound", KindObject},
	{"spec.domain.devices", "tpm", KindObject},
	{"spec.domain.devices", "video", KindObject},

	{"spec.domain.devices.disks[]", "tag", KindString},
	{"spec.domain.devices.disks[]", "blockSize", KindObject},
	{"spec.domain.devices.disks[]", "shareable", KindBoolean},
	{"spec.domain.devices.disks[]", "errorPolicy", KindString},
	{"spec.domain.devices.disks[]", "changedBlockTracking", KindBoolean},
	{"spec.domain.devices.disks[].lun", "reservation", KindBoolean},

	{"spec.domain.devices.interfaces[]", "binding", KindObject},
	{"spec.domain.devices.interfaces[]", "portRanges", KindArray},
	{"spec.domain.devices.interfaces[]", "dhcpOptions", KindObject},
	{"spec.domain.devices.interfaces[]", "tag", KindString},
	{"spec.domain.devices.interfaces[]", "acpiIndex", KindInteger},
	{"spec.domain.devices.interfaces[]", "slirp", KindObject},
	{"spec.domain.devices.interfaces[]", "sriov", KindObject},
	{"spec.domain.devices.interfaces[]", "macvtap", KindObject},
	{"spec.domain.devices.interfaces[]", "passt", KindObject},
	{"spec.domain.devices.interfaces[]", "passtBinding", KindObject},

	{"spec.volumes[]", "sysprep", KindObject},
	{"spec.volumes[]", "configMap", KindObject},
	{"spec.volumes[]", "secret", KindObject},
	{"spec.volumes[]", "downwardAPI", KindObject},
	{"spec.volumes[]", "serviceAccount", KindObject},
	{"spec.volumes[]", "downwardMetrics", KindObject},
	{"spec.volumes[]", "memoryDump", KindObject},
	{"spec.volumes[]", "containerPath", KindObject},

	{"spec.networks[]", "resourceClaim", KindObject},
}
