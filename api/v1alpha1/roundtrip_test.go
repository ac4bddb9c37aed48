package v1alpha1_test

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// fullVMI sets most supported spec fields, so that a round trip exercises the whole schema.
func fullVMI(name string) *vmletv1.VirtualMachineInstance {
	one, two := uint(1), uint(2)
	yes := true
	grace := int64(30)
	live := vmletv1.EvictionStrategyLiveMigrate
	guest := resource.MustParse("256Mi")
	return &vmletv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: vmletv1.VirtualMachineInstanceSpec{
			Domain: vmletv1.DomainSpec{
				Resources: vmletv1.ResourceRequirements{
					Requests: vmletv1.ResourceList{"memory": resource.MustParse("300Mi"), "cpu": resource.MustParse("500m")},
					Limits:   vmletv1.ResourceList{"memory": resource.MustParse("1Gi")},
				},
				CPU:     &vmletv1.CPU{Cores: 2, Sockets: 1, Threads: 1, Model: "Haswell-noTSX"},
				Memory:  &vmletv1.Memory{Guest: &guest},
				Machine: &vmletv1.Machine{Type: "pc-q35-7.2"},
				Firmware: &vmletv1.Firmware{
					UUID: "5d307ca9-b3ef-428c-8861-06e72d69f223", Serial: "vmlet-1",
					Bootloader: &vmletv1.Bootloader{BIOS: &vmletv1.BIOS{UseSerial: &yes}},
					KernelBoot: &vmletv1.KernelBoot{KernelArgs: "console=ttyS0", Container: &vmletv1.KernelBootContainer{
						Image: "example.org/kernel:1", KernelPath: "/boot/vmlinuz", InitrdPath: "/boot/initrd.img",
						ImagePullPolicy: vmletv1.PullIfNotPresent,
					}},
				},
				Devices: vmletv1.Devices{
					Disks: []vmletv1.Disk{
						{Name: "root", BootOrder: &one, Cache: vmletv1.CacheNone, IO: vmletv1.IONative, DedicatedIOThread: &yes,
							DiskDevice: vmletv1.DiskDevice{Disk: &vmletv1.DiskTarget{Bus: vmletv1.DiskBusVirtio, PciAddress: "0000:00:0a.0"}}},
						{Name: "cloudinit", Serial: "ci-1", DiskDevice: vmletv1.DiskDevice{CDRom: &vmletv1.CDRomTarget{Bus: vmletv1.DiskBusSATA, Tray: vmletv1.TrayStateClosed}}},
						{Name: "scratch", DiskDevice: vmletv1.DiskDevice{Disk: &vmletv1.DiskTarget{Bus: vmletv1.DiskBusSCSI}}},
					},
					Interfaces: []vmletv1.Interface{{
						Name: "default", Model: "virtio", MacAddress: "02:00:00:00:00:01", BootOrder: &two,
						InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}},
						Ports:                  []vmletv1.Port{{Name: "ssh", Port: 22, Protocol: vmletv1.ProtocolTCP}},
					}},
					Rng:                        &vmletv1.Rng{},
					AutoattachSerialConsole:    &yes,
					NetworkInterfaceMultiQueue: &yes,
				},
			},
			NodeSelector:                  map[string]string{"kubernetes.io/os": "linux"},
			EvictionStrategy:              &live,
			TerminationGracePeriodSeconds: &grace,
			Hostname:                      "guest",
			Subdomain:                     "vms",
			Networks: []vmletv1.Network{{Name: "default", NetworkSource: vmletv1.NetworkSource{
				Pod: &vmletv1.PodNetwork{VMNetworkCIDR: "10.0.2.0/24", VMIPv6NetworkCIDR: "fd10:0:2::/120"}}}},
			Volumes: []vmletv1.Volume{
				{Name: "root", VolumeSource: vmletv1.VolumeSource{ContainerDisk: &vmletv1.ContainerDiskSource{Image: "example.org/guest:1", Path: "/disk/disk.img"}}},
				{Name: "cloudinit", VolumeSource: vmletv1.VolumeSource{CloudInitNoCloud: &vmletv1.CloudInitNoCloudSource{CloudInitData: vmletv1.CloudInitData{
					UserData: "#cloud-config\n", NetworkDataSecretRef: &vmletv1.LocalObjectReference{Name: "net"}}}}},
				{Name: "scratch", VolumeSource: vmletv1.VolumeSource{EmptyDisk: &vmletv1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}}},
				{Name: "data", VolumeSource: vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
					PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: "data"}, Hotpluggable: true}}},
			},
			Paused: true,
		},
	}
}

// TestVMIRoundTrip creates a VMI, reads it back, and updates its status through the status
// subresource.
func TestVMIRoundTrip(t *testing.T) {
	env := apiServer(t)
	ctx := testContext(t)
	vmi := fullVMI("roundtrip")
	want := vmi.Spec.DeepCopy()
	if err := env.Client.Create(ctx, vmi, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
		t.Fatalf("create: %v", err)
	}
	got := &vmletv1.VirtualMachineInstance{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(vmi), got); err != nil {
		t.Fatalf("get: %v", err)
	}
	if !equality.Semantic.DeepEqual(&got.Spec, want) {
		t.Fatalf("spec changed in the round trip\nsent: %+v\ngot:  %+v", want, &got.Spec)
	}

	now := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	status := vmletv1.VirtualMachineInstanceStatus{
		NodeName: "node-1",
		Phase:    vmletv1.Running,
		PhaseTransitionTimestamps: []vmletv1.VirtualMachineInstancePhaseTransitionTimestamp{
			{Phase: vmletv1.Running, PhaseTransitionTimestamp: now},
		},
		Conditions: []metav1.Condition{
			{Type: vmletv1.VirtualMachineInstanceReady, Status: metav1.ConditionTrue, Reason: "GuestRunning", LastTransitionTime: now, ObservedGeneration: got.Generation},
			{Type: vmletv1.VirtualMachineInstancePaused, Status: metav1.ConditionTrue, Reason: "PausedByUser", LastTransitionTime: now},
		},
		Interfaces: []vmletv1.VirtualMachineInstanceNetworkInterface{{
			Name: "default", MAC: "02:00:00:00:00:01", IP: "10.0.2.2", IPs: []string{"10.0.2.2", "fd10:0:2::2"},
			InterfaceName: "eth0", InfoSource: "domain, guest-agent",
		}},
		GuestOSInfo: vmletv1.VirtualMachineInstanceGuestOSInfo{Name: "Debian GNU/Linux", ID: "debian", Version: "12", KernelRelease: "6.1.0-28-cloud-amd64"},
		MigrationState: &vmletv1.VirtualMachineInstanceMigrationState{
			StartTimestamp: &now, EndTimestamp: &now, SourceNode: "node-1", TargetNode: "node-2",
			Completed: true, Mode: vmletv1.MigrationPreCopy, MigrationUID: "uid-1",
		},
		VolumeStatus: []vmletv1.VolumeStatus{{Name: "root", Target: "vda", Phase: vmletv1.VolumeReady}},
		Launcher: &vmletv1.LauncherStatus{
			PID: 4242, Accelerator: vmletv1.AcceleratorTCG, AccelerationReason: "kvm_pvm loaded: nested KVM unusable", QEMUVersion: "7.2.15",
		},
	}
	got.Status = *status.DeepCopy()
	if err := env.Client.Status().Update(ctx, got); err != nil {
		t.Fatalf("update status: %v", err)
	}
	final := &vmletv1.VirtualMachineInstance{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(vmi), final); err != nil {
		t.Fatalf("get after status update: %v", err)
	}
	if !equality.Semantic.DeepEqual(final.Status, status) {
		t.Fatalf("status changed in the round trip\nsent: %+v\ngot:  %+v", status, final.Status)
	}

	// The status subresource ignores spec changes and the main resource ignores status changes.
	final.Spec.Paused = false
	final.Status.NodeName = "node-2"
	if err := env.Client.Update(ctx, final); err != nil {
		t.Fatalf("update spec: %v", err)
	}
	if final.Spec.Paused || final.Status.NodeName != "node-1" {
		t.Fatalf("after a main-resource update: paused=%v nodeName=%q, want false and node-1", final.Spec.Paused, final.Status.NodeName)
	}
}

// TestInvalidStatusIsRejected checks that status is validated too (phase enum, condition shape).
func TestInvalidStatusIsRejected(t *testing.T) {
	env := apiServer(t)
	ctx := testContext(t)
	vmi := fullVMI("bad-status")
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatalf("create: %v", err)
	}
	vmi.Status.Phase = "Exploded"
	wantRejected(t, env.Client.Status().Update(ctx, vmi), invalid, notSupp, "status.phase")
	vmi.Status.Phase = vmletv1.Running
	vmi.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: "Maybe", Reason: "x", LastTransitionTime: metav1.Now()}}
	wantRejected(t, env.Client.Status().Update(ctx, vmi), invalid, notSupp, "status.conditions[0].status")
}

// TestMigrationRoundTrip creates a migration, updates its status and checks its spec is
// immutable and its vmiName validated.
func TestMigrationRoundTrip(t *testing.T) {
	env := apiServer(t)
	ctx := testContext(t)
	bad := &vmletv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "default"},
		Spec:       vmletv1.VirtualMachineInstanceMigrationSpec{VMIName: "a,b"},
	}
	wantRejected(t, env.Client.Create(ctx, bad), invalid, badValue, "spec.vmiName")

	m := &vmletv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "migrate-1", Namespace: "default"},
		Spec:       vmletv1.VirtualMachineInstanceMigrationSpec{VMIName: "roundtrip"},
	}
	if err := env.Client.Create(ctx, m, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
		t.Fatalf("create: %v", err)
	}
	now := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	m.Status = vmletv1.VirtualMachineInstanceMigrationStatus{
		Phase:                     vmletv1.MigrationTargetReady,
		PhaseTransitionTimestamps: []vmletv1.VirtualMachineInstanceMigrationPhaseTransitionTimestamp{{Phase: vmletv1.MigrationTargetReady, PhaseTransitionTimestamp: now}},
		Conditions:                []metav1.Condition{{Type: "TargetReady", Status: metav1.ConditionTrue, Reason: "Listening", LastTransitionTime: now}},
		MigrationState:            &vmletv1.VirtualMachineInstanceMigrationState{SourceNode: "node-1", TargetNode: "node-2", TargetNodeAddress: "127.0.0.1:4444"},
	}
	want := m.Status.DeepCopy()
	if err := env.Client.Status().Update(ctx, m); err != nil {
		t.Fatalf("update status: %v", err)
	}
	got := &vmletv1.VirtualMachineInstanceMigration{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(m), got); err != nil {
		t.Fatalf("get: %v", err)
	}
	if !equality.Semantic.DeepEqual(&got.Status, want) {
		t.Fatalf("status changed in the round trip\nsent: %+v\ngot:  %+v", want, &got.Status)
	}
	got.Spec.VMIName = "other"
	wantRejected(t, env.Client.Update(ctx, got), invalid, badValue, "spec")
}
