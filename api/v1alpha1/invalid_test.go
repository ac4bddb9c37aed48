package v1alpha1_test

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	invalid  = metav1.StatusReasonInvalid
	badReq   = metav1.StatusReasonBadRequest
	anyCause = metav1.CauseType("")
	notSupp  = metav1.CauseTypeFieldValueNotSupported
	forbid   = metav1.CauseTypeForbidden
	dup      = metav1.CauseTypeFieldValueDuplicate
	badValue = metav1.CauseTypeFieldValueInvalid
)

type invalidCase struct {
	name   string
	mutate func(t *testing.T, o *unstructured.Unstructured)
	strict bool // create with fieldValidation=Strict
	reason metav1.StatusReason
	cause  metav1.CauseType
	field  string
}

func set(path, key string, v any) func(t *testing.T, o *unstructured.Unstructured) {
	return func(t *testing.T, o *unstructured.Unstructured) { at(t, o, path)[key] = v }
}

var invalidCases = []invalidCase{
	{"memory with a space", set("spec.domain.memory", "guest", "1 GiB"), false, invalid, badValue, "spec.domain.memory.guest"},
	{"memory not a quantity", set("spec.domain.memory", "guest", "lots"), false, invalid, badValue, "spec.domain.memory.guest"},
	{"negative memory", set("spec.domain.memory", "guest", "-1Gi"), false, invalid, badValue, "spec.domain.memory.guest"},
	{"memory below 64Mi", set("spec.domain.memory", "guest", "32Mi"), false, invalid, badValue, "spec.domain.memory.guest"},
	{"huge memory", set("spec.domain.memory", "guest", "64Pi"), false, invalid, badValue, "spec.domain.memory.guest"},
	{"no memory at all", func(t *testing.T, o *unstructured.Unstructured) {
		delete(at(t, o, "spec.domain"), "memory")
	}, false, invalid, badValue, "spec.domain"},
	{"disk without volume", set("spec.domain.devices.disks[0]", "name", "other"), false, invalid, badValue, "spec.domain.devices.disks"},
	{"duplicate disk names", func(t *testing.T, o *unstructured.Unstructured) {
		d := at(t, o, "spec.domain.devices")
		d["disks"] = append(d["disks"].([]any), map[string]any{"name": "root"})
	}, false, invalid, dup, "spec.domain.devices.disks[1]"},
	{"duplicate volume names", func(t *testing.T, o *unstructured.Unstructured) {
		s := at(t, o, "spec")
		s["volumes"] = append(s["volumes"].([]any), map[string]any{"name": "root", "emptyDisk": map[string]any{"capacity": "1Gi"}})
	}, false, invalid, dup, "spec.volumes[1]"},
	{"unknown disk bus", set("spec.domain.devices.disks[0].disk", "bus", "ide"), false, invalid, notSupp, "spec.domain.devices.disks[0].disk.bus"},
	{"usb bus (KubeVirt has it, vmlet not)", set("spec.domain.devices.disks[0].disk", "bus", "usb"), false, invalid, notSupp, "spec.domain.devices.disks[0].disk.bus"},
	{"cdrom on virtio", func(t *testing.T, o *unstructured.Unstructured) {
		d := at(t, o, "spec.domain.devices.disks[0]")
		delete(d, "disk")
		d["cdrom"] = map[string]any{"bus": "virtio"}
	}, false, invalid, notSupp, "spec.domain.devices.disks[0].cdrom.bus"},
	{"two targets on one disk", set("spec.domain.devices.disks[0]", "cdrom", map[string]any{}), false, invalid, badValue, "spec.domain.devices.disks[0]"},
	{"unknown cache mode", set("spec.domain.devices.disks[0]", "cache", "unsafe"), false, invalid, notSupp, "spec.domain.devices.disks[0].cache"},
	{"1000 cores", set("spec.domain.cpu", "cores", int64(1000)), false, invalid, anyCause, "spec.domain.cpu.cores"},
	{"zero threads", set("spec.domain.cpu", "threads", int64(0)), false, invalid, anyCause, "spec.domain.cpu.threads"},
	{"32x32 vCPUs", func(t *testing.T, o *unstructured.Unstructured) {
		c := at(t, o, "spec.domain.cpu")
		c["sockets"], c["cores"] = int64(32), int64(32)
	}, false, invalid, badValue, "spec.domain.cpu"},
	{"cpu model with a comma", set("spec.domain.cpu", "model", "qemu64,+vmx"), false, invalid, badValue, "spec.domain.cpu.model"},
	{"machine type with a comma", set("spec.domain", "machine", map[string]any{"type": "q35,accel=kvm"}), false, invalid, badValue, "spec.domain.machine.type"},
	{"disk name with a comma", func(t *testing.T, o *unstructured.Unstructured) {
		at(t, o, "spec.domain.devices.disks[0]")["name"] = "a,b"
		at(t, o, "spec.volumes[0]")["name"] = "a,b"
	}, false, invalid, badValue, "spec.domain.devices.disks[0].name"},
	{"volume name with a newline", func(t *testing.T, o *unstructured.Unstructured) {
		at(t, o, "spec.domain.devices.disks[0]")["name"] = "a\nb"
		at(t, o, "spec.volumes[0]")["name"] = "a\nb"
	}, false, invalid, badValue, "spec.volumes[0].name"},
	{"interface name with a quote", func(t *testing.T, o *unstructured.Unstructured) {
		at(t, o, "spec.domain.devices.interfaces[0]")["name"] = `a"b`
		at(t, o, "spec.networks[0]")["name"] = `a"b`
	}, false, invalid, badValue, "spec.domain.devices.interfaces[0].name"},
	{"pull secret not a Secret name", set("spec.volumes[0].containerDisk", "imagePullSecret", "Reg_Cred"), false, invalid, badValue, "spec.volumes[0].containerDisk.imagePullSecret"},
	{"two sources in one volume", set("spec.volumes[0]", "emptyDisk", map[string]any{"capacity": "1Gi"}), false, invalid, badValue, "spec.volumes[0]"},
	{"volume without source", func(t *testing.T, o *unstructured.Unstructured) {
		delete(at(t, o, "spec.volumes[0]"), "containerDisk")
	}, false, invalid, badValue, "spec.volumes[0]"},
	{"emptyDisk of zero bytes", func(t *testing.T, o *unstructured.Unstructured) {
		v := at(t, o, "spec.volumes[0]")
		delete(v, "containerDisk")
		v["emptyDisk"] = map[string]any{"capacity": "0"}
	}, false, invalid, badValue, "spec.volumes[0].emptyDisk.capacity"},
	{"hostDisk path with ..", func(t *testing.T, o *unstructured.Unstructured) {
		v := at(t, o, "spec.volumes[0]")
		delete(v, "containerDisk")
		v["hostDisk"] = map[string]any{"path": "/var/../etc/shadow", "type": "Disk"}
	}, false, invalid, badValue, "spec.volumes[0].hostDisk.path"},
	{"cloud-init with two user data sources", func(t *testing.T, o *unstructured.Unstructured) {
		v := at(t, o, "spec.volumes[0]")
		delete(v, "containerDisk")
		v["cloudInitNoCloud"] = map[string]any{"userData": "#cloud-config", "userDataBase64": "I2Nsb3VkLWNvbmZpZw=="}
	}, false, invalid, badValue, "spec.volumes[0].cloudInitNoCloud"},
	{"lun on a containerDisk", func(t *testing.T, o *unstructured.Unstructured) {
		d := at(t, o, "spec.domain.devices.disks[0]")
		delete(d, "disk")
		d["lun"] = map[string]any{}
	}, false, invalid, badValue, "spec.domain.devices.disks"},
	{"interface without network", set("spec.networks[0]", "name", "other"), false, invalid, badValue, "spec.domain.devices.interfaces"},
	{"two bindings on one interface", set("spec.domain.devices.interfaces[0]", "bridge", map[string]any{}), false, invalid, badValue, "spec.domain.devices.interfaces[0]"},
	{"bad MAC address", set("spec.domain.devices.interfaces[0]", "macAddress", "zz:00:00:00:00:01"), false, invalid, badValue, "spec.domain.devices.interfaces[0].macAddress"},
	{"port 0", set("spec.domain.devices.interfaces[0].ports[0]", "port", int64(0)), false, invalid, anyCause, "spec.domain.devices.interfaces[0].ports[0].port"},
	{"port 70000", set("spec.domain.devices.interfaces[0].ports[0]", "port", int64(70000)), false, invalid, anyCause, "spec.domain.devices.interfaces[0].ports[0].port"},
	{"memory over 4Ti", set("spec.domain.memory", "guest", "5Ti"), false, invalid, badValue, "spec.domain.memory.guest"},
	{"SCTP port", set("spec.domain.devices.interfaces[0].ports[0]", "protocol", "SCTP"), false, invalid, notSupp, "spec.domain.devices.interfaces[0].ports[0].protocol"},
	{"duplicate boot order", func(t *testing.T, o *unstructured.Unstructured) {
		at(t, o, "spec.domain.devices.disks[0]")["bootOrder"] = int64(1)
		at(t, o, "spec.domain.devices.interfaces[0]")["bootOrder"] = int64(1)
	}, false, invalid, badValue, "spec.domain.devices.interfaces"},
	{"pod and multus network", set("spec.networks[0]", "multus", map[string]any{"networkName": "blue"}), false, invalid, badValue, "spec.networks[0]"},
	{"masquerade on a multus network", func(t *testing.T, o *unstructured.Unstructured) {
		addMultus(t, o, "blue", map[string]any{"name": "blue", "masquerade": map[string]any{}})
	}, false, invalid, badValue, "spec.domain.devices.interfaces"},
	{"default multus network", func(t *testing.T, o *unstructured.Unstructured) {
		addMultus(t, o, "blue", map[string]any{"name": "blue", "bridge": map[string]any{}})
		at(t, o, "spec.networks[1].multus")["default"] = true
	}, false, invalid, badValue, "spec.networks[1].multus.default"},
	{"absent on the pod network", set("spec.domain.devices.interfaces[0]", "state", "absent"), false, invalid, badValue, "spec.domain.devices.interfaces"},
	{"link state down", set("spec.domain.devices.interfaces[0]", "state", "down"), false, invalid, notSupp, "spec.domain.devices.interfaces[0].state"},
	{"hyperv panic device (KubeVirt has it, vmlet not)", set("spec.domain.devices", "panicDevices", []any{map[string]any{"model": "hyperv"}}), false, invalid, badValue, "spec.domain.devices.panicDevices[0].model"},
	{"unknown panic device model", set("spec.domain.devices", "panicDevices", []any{map[string]any{"model": "pvpanic-pci"}}), false, invalid, notSupp, "spec.domain.devices.panicDevices[0].model"},
	{"the isa panic device twice (once by default)", set("spec.domain.devices", "panicDevices", []any{map[string]any{}, map[string]any{"model": "isa"}}), false, invalid, badValue, "spec.domain.devices.panicDevices"},
	{"three panic devices", set("spec.domain.devices", "panicDevices", []any{map[string]any{"model": "isa"}, map[string]any{"model": "pvpanic"}, map[string]any{"model": "pvpanic"}}), false, invalid, anyCause, "spec.domain.devices.panicDevices"},
	{"unsupported KubeVirt field", set("spec.domain", "clock", map[string]any{"utc": map[string]any{}}), false, invalid, forbid, "spec.domain.clock"},
	{"unsupported KubeVirt list", set("spec", "topologySpreadConstraints", []any{map[string]any{"maxSkew": int64(1)}}), false, invalid, forbid, "spec.topologySpreadConstraints"},
	{"toleration operator", set("spec", "tolerations", []any{map[string]any{"key": "k", "operator": "In"}}), false, invalid, badValue, "spec.tolerations"},
	{"toleration effect", set("spec", "tolerations", []any{map[string]any{"key": "k", "operator": "Exists", "effect": "NoRun"}}), false, invalid, badValue, "spec.tolerations"},
	{"toleration Exists with a value", set("spec", "tolerations", []any{map[string]any{"key": "k", "operator": "Exists", "value": "v"}}), false, invalid, badValue, "spec.tolerations"},
	{"toleration of an empty key with Equal", set("spec", "tolerations", []any{map[string]any{"value": "v"}}), false, invalid, badValue, "spec.tolerations"},
	{"tolerationSeconds without NoExecute", set("spec", "tolerations", []any{map[string]any{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": int64(30)}}), false, invalid, badValue, "spec.tolerations"},
	// x86's COMMAND_LINE_SIZE is 2048 with the NUL: QEMU refuses 2048 bytes of arguments.
	{"kernelArgs of 2048 bytes", set("spec.domain", "firmware", map[string]any{"kernelBoot": map[string]any{
		"kernelArgs": strings.Repeat("a", 2048), "container": map[string]any{"image": "vmlet.dev/k:1", "kernelPath": "/vmlinuz"}}}),
		false, invalid, anyCause, "spec.domain.firmware.kernelBoot.kernelArgs"},
	{"unknown field with strict validation", set("spec.domain", "bogus", true), true, badReq, "", ""},
}

// TestInvalidVMIsAreRejected creates each invalid VMI and expects the API server to reject it
// with a structured cause on the offending field.
func TestInvalidVMIsAreRejected(t *testing.T) {
	env := apiServer(t)
	ctx := testContext(t)
	for i, tc := range invalidCases {
		t.Run(tc.name, func(t *testing.T) {
			o := validVMI(fmt.Sprintf("invalid-%d", i))
			tc.mutate(t, o)
			var opts []client.CreateOption
			if tc.strict {
				opts = append(opts, client.FieldValidation(metav1.FieldValidationStrict))
			}
			err := env.Client.Create(ctx, o, opts...)
			if tc.reason == badReq {
				// Strict decoding errors carry no causes: the field path is only in the message.
				wantBadRequest(t, err, `unknown field "spec.domain.bogus"`)
				return
			}
			wantRejected(t, err, tc.reason, tc.cause, tc.field)
		})
	}
}

// TestBaseVMIIsValid guards the table above: each case must fail because of its mutation.
func TestBaseVMIIsValid(t *testing.T) {
	env := apiServer(t)
	ctx := testContext(t)
	o := validVMI("valid-base")
	if err := env.Client.Create(ctx, o, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
		t.Fatalf("create base VMI: %v", err)
	}
}

// addMultus adds a multus network name (network attachment "vmlet-node") and interface ifc.
func addMultus(t *testing.T, o *unstructured.Unstructured, name string, ifc map[string]any) {
	t.Helper()
	s := at(t, o, "spec")
	s["networks"] = append(s["networks"].([]any), map[string]any{"name": name, "multus": map[string]any{"networkName": "vmlet-node"}})
	d := at(t, o, "spec.domain.devices")
	d["interfaces"] = append(d["interfaces"].([]any), ifc)
}
