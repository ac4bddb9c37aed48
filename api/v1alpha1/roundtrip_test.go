package v1alpha1_test

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// fullVMI sets most supported spec fields, so that a round trip exercises the whole schema.
func fullVMI(name string) *v1alpha1.VirtualMachineInstance {
	one, two := uint(1), uint(2)
	yes := true
	grace := int64(30)
	live := v1alpha1.EvictionStrategyLiveMigrate
	guest := resource.MustParse("256Mi")
	return &v1alpha1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1alpha1.VirtualMachineInstanceSpec{
			Domain: v1alpha1.DomainSpec{
				Resources: v1alpha1.ResourceRequirements{
					Requests: v1alpha1.ResourceList{"memory": resource.MustParse("300Mi"), "cpu": resource.MustParse("500m")},
					Limits:   v1alpha1.ResourceList{"memory": resource.MustParse("1Gi")},
				},
				CPU:     &v1alpha1.CPU{Cores: 2, Sockets: 1, Threads: 1, Model: "Haswell-noTSX"},
				Memory:  &v1alpha1.Memory{Guest: &guest},
				Machine: &v1alpha1.Machine{Type: "pc-q35-7.2"},
				Firmware: &v1alpha1.Firmware{
					UUID: "5d307ca9-b3ef-428c-8861-06e72d69f223", Serial: "vmlet-1",
					Bootloader: &v1alpha1.Bootloader{BIOS: &v1alpha1.BIOS{UseSerial: &yes}},
					KernelBoot: &v1alpha1.KernelBoot{KernelArgs: "console=ttyS0", Container: &v1alpha1.KernelBootContainer{
						Image: "example.org/kernel:1", KernelPath: "/boot/vmlinuz", InitrdPath: "/boot/initrd.img",
						ImagePullPolicy: v1alpha1.PullIfNotPresent,
					}},
				},
				Devices: v1alpha1.Devices{
					Disks: []v1alpha1.Disk{
						{Name: "root", BootOrder: &one, Cache: v1alpha1.CacheNone, IO: v1alpha1.IONative, DedicatedIOThread: &yes,
							DiskDevice: v1alpha1.DiskDevice{Disk: &v1alpha1.DiskTarget{Bus: v1alpha1.DiskBusVirtio, PciAddress: "0000:00:0a.0"}}},
						{Name: "cloudinit", Serial: "ci-1", DiskDevice: v1alpha1.DiskDevice{CDRom: &v1alpha1.CDRomTarget{Bus: v1alpha1.DiskBusSATA, Tray: v1alpha1.TrayStateClosed}}},
						{Name: "scratch", DiskDevice: v1alpha1.DiskDevice{Disk: &v1alpha1.DiskTarget{Bus: v1alpha1.DiskBusSCSI}}},
					},
					Interfaces: []v1alpha1.Interface{{
						Name: "default", Model: "virtio", MacAddress: "02:00:00:00:00:01", BootOrder: &two,
						InterfaceBindingMethod: v1alpha1.InterfaceBindingMethod{Masquerade: &v1alpha1.InterfaceMasquerade{}},
						Ports:                  []v1alpha1.Port{{Name: "ssh", Port: 22, Protocol: v1alpha1.ProtocolTCP}},
					}},
					Rng:                        &v1alpha1.Rng{},
					AutoattachSerialConsole:    &yes,
					NetworkInterfaceMultiQueue: &yes,
				},
			},
			NodeSelector:                  map[string]string{"kubernetes.io/os": "linux"},
			EvictionStrategy:              &live,
			TerminationGracePeriodSeconds: &grace,
			Hostname:                      "guest",
			Subdomain:                     "vms",
			Networks: []v1alpha1.Network{{Name: "default", NetworkSource: v1alpha1.NetworkSource{
				Pod: &v1alpha1.PodNetwork{VMNetworkCIDR: "10.0.2.0/24", VMIPv6NetworkCIDR: "fd10:0:2::/120"}}}},
			Volumes: []v1alpha1.Volume{
				{Name: "root", VolumeSource: v1alpha1.VolumeSource{ContainerDisk: &v1alpha1.ContainerDiskSource{Image: "example.org/guest:1", Path: "/disk/disk.img"}}},
				{Name: "cloudinit", VolumeSource: v1alpha1.VolumeSource{CloudInitNoCloud: &v1alpha1.CloudInitNoCloudSource{CloudInitData: v1alpha1.CloudInitData{
					UserData: "#cloud-config\n", NetworkDataSecretRef: &v1alpha1.LocalObjectReference{Name: "net"}}}}},
				{Name: "scratch", VolumeSource: v1alpha1.VolumeSource{EmptyDisk: &v1alpha1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}}},
				{Name: "data", VolumeSource: v1alpha1.VolumeSource{PersistentVolumeClaim: &v1alpha1.PersistentVolumeClaimVolumeSource{
					PersistentVolumeClaimSource: v1alpha1.PersistentVolumeClaimSource{ClaimName: "data"}, Hotpluggable: true}}},
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
	got := &v1alpha1.VirtualMachineInstance{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(vmi), got); err != nil {
		t.Fatalf("get: %v", err)
	}
	if !equality.Semantic.DeepEqual(&got.Spec, want) {
		t.Fatalf("spec changed in the round trip\nsent: %+v\ngot:  %+v", want, &got.Spec)
	}

	now := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	status := v1alpha1.VirtualMachineInstanceStatus{
		NodeName: "node-1",
		Phase:    v1alpha1.Running,
		PhaseTransitionTimestamps: []v1alpha1.VirtualMachineInstancePhaseTransitionTimestamp{
			{Phase: v1alpha1.Running, PhaseTransitionTimestamp: now},
		},
		Conditions: []metav1.Condition{
			{Type: v1alpha1.VirtualMachineInstanceReady, Status: metav1.ConditionTrue, Reason: "GuestRunning", LastTransitionTime: now, ObservedGeneration: got.Generation},
			{Type: v1alpha1.VirtualMachineInstancePaused, Status: metav1.ConditionTrue, Reason: "PausedByUser", LastTransitionTime: now},
		},
		Interfaces: []v1alpha1.VirtualMachineInstanceNetworkInterface{{
			Name: "default", MAC: "02:00:00:00:00:01", IP: "10.0.2.2", IPs: []string{"10.0.2.2", "fd10:0:2::2"},
			InterfaceName: "eth0", InfoSource: "domain, guest-agent",
		}},
		GuestOSInfo: v1alpha1.VirtualMachineInstanceGuestOSInfo{Name: "Debian GNU/Linux", ID: "debian", Version: "12", KernelRelease: "6.1.0-28-cloud-amd64"},
		MigrationState: &v1alpha1.VirtualMachineInstanceMigrationState{
			StartTimestamp: &now, EndTimestamp: &now, SourceNode: "node-1", TargetNode: "node-2",
			Completed: true, Mode: v1alpha1.MigrationPreCopy, MigrationUID: "uid-1",
		},
		VolumeStatus: []v1alpha1.VolumeStatus{{Name: "root", Target: "vda", Phase: v1alpha1.VolumeReady}},
		Launcher: &v1alpha1.LauncherStatus{
			PID: 4242, Accelerator: v1alpha1.AcceleratorTCG, AccelerationReason: "kvm_pvm loaded: nested KVM unusable", QEMUVersion: "7.2.15",
		},
	}
	got.Status = *status.DeepCopy()
	if err := env.Client.Status().Update(ctx, got); err != nil {
		t.Fatalf("update status: %v", err)
	}
	final := &v1alpha1.VirtualMachineInstance{}
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
	vmi.Status.Phase = v1alpha1.Running
	vmi.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: "Maybe", Reason: "x", LastTransitionTime: metav1.Now()}}
	wantRejected(t, env.Client.Status().Update(ctx, vmi), invalid, notSupp, "status.conditions[0].status")
}

// TestMigrationRoundTrip creates a migration, updates its status and checks its spec is
// immutable and its vmiName validated.
func TestMigrationRoundTrip(t *testing.T) {
	env := apiServer(t)
	ctx := testContext(t)
	bad := &v1alpha1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "default"},
		Spec:       v1alpha1.VirtualMachineInstanceMigrationSpec{VMIName: "a,b"},
	}
	wantRejected(t, env.Client.Create(ctx, bad), invalid, badValue, "spec.vmiName")

	m := &v1alpha1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "migrate-1", Namespace: "default"},
		Spec:       v1alpha1.VirtualMachineInstanceMigrationSpec{VMIName: "roundtrip"},
	}
	if err := env.Client.Create(ctx, m, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
		t.Fatalf("create: %v", err)
	}
	now := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	m.Status = v1alpha1.VirtualMachineInstanceMigrationStatus{
		Phase:                     v1alpha1.MigrationTargetReady,
		PhaseTransitionTimestamps: []v1alpha1.VirtualMachineInstanceMigrationPhaseTransitionTimestamp{{Phase: v1alpha1.MigrationTargetReady, PhaseTransitionTimestamp: now}},
		Conditions:                []metav1.Condition{{Type: "TargetReady", Status: metav1.ConditionTrue, Reason: "Listening", LastTransitionTime: now}},
		MigrationState:            &v1alpha1.VirtualMachineInstanceMigrationState{SourceNode: "node-1", TargetNode: "node-2", TargetNodeAddress: "127.0.0.1:4444"},
	}
	want := m.Status.DeepCopy()
	if err := env.Client.Status().Update(ctx, m); err != nil {
		t.Fatalf("update status: %v", err)
	}
	got := &v1alpha1.VirtualMachineInstanceMigration{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(m), got); err != nil {
		t.Fatalf("get: %v", err)
	}
	if !equality.Semantic.DeepEqual(&got.Status, want) {
		t.Fatalf("status changed in the round trip\nsent: %+v\ngot:  %+v", want, &got.Status)
	}
	got.Spec.VMIName = "other"
	wantRejected(t, env.Client.Update(ctx, got), invalid, badValue, "spec")
}
