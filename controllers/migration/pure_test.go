package migration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

func running(mut ...func(*vmletv1.VirtualMachineInstance)) *vmletv1.VirtualMachineInstance {
	v := &vmletv1.VirtualMachineInstance{}
	v.Name = "vm"
	v.Status.Phase = vmletv1.Running
	v.Status.NodeName = "node-1"
	v.Spec.Volumes = []vmletv1.Volume{{Name: "root", VolumeSource: vmletv1.VolumeSource{ContainerDisk: &vmletv1.ContainerDiskSource{Image: "img"}}}}
	v.Spec.Domain.Devices.AutoattachPodInterface = ptr.To(false)
	for _, m := range mut {
		m(v)
	}
	return v
}

func TestMigratable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		vmi    *vmletv1.VirtualMachineInstance
		reason string
		method vmletv1.VirtualMachineInstanceMigrationMethod
	}{
		{"containerDisk is copied", running(), ReasonMigratable, vmletv1.BlockMigration},
		{"no disks", running(func(v *vmletv1.VirtualMachineInstance) { v.Spec.Volumes = nil }), ReasonMigratable, vmletv1.LiveMigration},
		{"cloud-init only is rebuilt", running(func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{{Name: "ci", VolumeSource: vmletv1.VolumeSource{CloudInitNoCloud: &vmletv1.CloudInitNoCloudSource{}}}}
		}), ReasonMigratable, vmletv1.LiveMigration},
		{"unshared hostDisk", running(func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = append(v.Spec.Volumes, vmletv1.Volume{Name: "h", VolumeSource: vmletv1.VolumeSource{HostDisk: &vmletv1.HostDisk{Path: "/x"}}})
		}), ReasonDisksNotMigratable, ""},
		{"shared hostDisk", running(func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = append(v.Spec.Volumes, vmletv1.Volume{Name: "h", VolumeSource: vmletv1.VolumeSource{HostDisk: &vmletv1.HostDisk{Path: "/x", Shared: ptr.To(true)}}})
		}), ReasonMigratable, vmletv1.BlockMigration},
		{"claim", running(func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = append(v.Spec.Volumes, vmletv1.Volume{Name: "c", VolumeSource: vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
				PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: "pvc"}}}})
		}), ReasonDisksNotMigratable, ""},
		{"hot-plugged claim not attached yet (no access modes)", running(hotClaim("c", nil)), ReasonDisksNotMigratable, ""},
		{"hot-plugged ReadWriteOnce claim", running(hotClaim("c", []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce})), ReasonDisksNotMigratable, ""},
		{"hot-plugged shared claim (ReadWriteMany, as local mode records its claims)", running(hotClaim("c", []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany})), ReasonMigratable, vmletv1.BlockMigration},
		{"ephemeral volume on a claim no other node reaches", running(ephemeral(nil)), ReasonDisksNotMigratable, ""},
		{"ephemeral volume on a ReadWriteOnce claim", running(ephemeral([]corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce})), ReasonDisksNotMigratable, ""},
		{"ephemeral volume on a ReadOnlyMany claim: its overlay is copied", running(func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = nil
			ephemeral([]corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany})(v)
		}), ReasonMigratable, vmletv1.BlockMigration},
		{"a ReadOnlyMany claim as a disk is not shared for writing", running(func(v *vmletv1.VirtualMachineInstance) {
			hotClaim("c", []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany})(v)
			v.Spec.Volumes[1].PersistentVolumeClaim.Hotpluggable = false
			v.Status.VolumeStatus[0].HotplugVolume = nil
		}), ReasonDisksNotMigratable, ""},
		{"bridge on the pod network", running(func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Networks = []vmletv1.Network{{Name: "default", NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}}
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default", InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Bridge: &vmletv1.InterfaceBridge{}}}}
		}), ReasonInterfaceNotMigratable, ""},
		{"masquerade on the pod network", running(func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Networks = []vmletv1.Network{{Name: "default", NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}}
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default", InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}}}}
		}), ReasonMigratable, vmletv1.BlockMigration},
		{"no interfaces listed: KubeVirt's auto-attached bridge", running(func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.AutoattachPodInterface = nil
		}), ReasonInterfaceNotMigratable, ""},
		{"host-passthrough", running(func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.CPU = &vmletv1.CPU{Model: "host-passthrough"}
		}), ReasonCPUModeNotMigratable, ""},
		{"secondary network (hot-plugged)", running(func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Networks = []vmletv1.Network{{Name: "n", NetworkSource: vmletv1.NetworkSource{Multus: &vmletv1.MultusNetwork{NetworkName: "vmlet-node"}}}}
		}), ReasonHotplugNotMigratable, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Migratable(tc.vmi)
			if v.Reason != tc.reason || v.OK != (tc.reason == ReasonMigratable) || v.Method != tc.method {
				t.Fatalf("Migratable = %+v, want reason %s method %q", v, tc.reason, tc.method)
			}
			if !v.OK && v.Message == "" {
				t.Fatal("no message for a vmi that cannot migrate")
			}
		})
	}
}

// TestMigratableSpanning: interfaces of secondary networks that span the nodes migrate (a
// "namespace/" prefix of networkName ignored); one of any other network keeps the vmi where it
// is, and the message names the network and those that would do.
func TestMigratableSpanning(t *testing.T) {
	spanning := []string{"vmlet-shared"}
	if v := Migratable(running(multus("vmlet-shared", "default/vmlet-shared")), spanning...); !v.OK || v.Method != vmletv1.BlockMigration {
		t.Errorf("spanning networks only: %+v, want migratable", v)
	}
	v := Migratable(running(multus("vmlet-shared", "vmlet-node")), spanning...)
	if v.OK || v.Reason != ReasonHotplugNotMigratable || !strings.Contains(v.Message, "network n1 is a secondary (multus) network, vmlet-node,") || !strings.Contains(v.Message, "(these do: vmlet-shared)") {
		t.Errorf("a node's own network: %+v", v)
	}
	if v := Migratable(running(multus("vmlet-shared"))); v.OK || strings.Contains(v.Message, "these do") {
		t.Errorf("no spanning networks: %+v", v)
	}
}

// multus attaches the vmi to multus networks by networkName (interfaces n0, n1, ...).
func multus(names ...string) func(*vmletv1.VirtualMachineInstance) {
	return func(v *vmletv1.VirtualMachineInstance) {
		for i, name := range names {
			v.Spec.Networks = append(v.Spec.Networks, vmletv1.Network{Name: fmt.Sprintf("n%d", i),
				NetworkSource: vmletv1.NetworkSource{Multus: &vmletv1.MultusNetwork{NetworkName: name}}})
		}
	}
}

// hotClaim adds a hot-plugged claim volume whose status records modes (nil: none recorded).
func hotClaim(name string, modes []corev1.PersistentVolumeAccessMode) func(*vmletv1.VirtualMachineInstance) {
	return func(v *vmletv1.VirtualMachineInstance) {
		v.Spec.Volumes = append(v.Spec.Volumes, vmletv1.Volume{Name: name, VolumeSource: vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: "pvc-" + name}, Hotpluggable: true}}})
		s := vmletv1.VolumeStatus{Name: name, HotplugVolume: &vmletv1.HotplugVolumeStatus{}}
		if modes != nil {
			s.PersistentVolumeClaimInfo = &vmletv1.PersistentVolumeClaimInfo{ClaimName: "pvc-" + name, AccessModes: modes}
		}
		v.Status.VolumeStatus = append(v.Status.VolumeStatus, s)
	}
}

// ephemeral adds an ephemeral volume over a claim whose status records modes (nil: none).
func ephemeral(modes []corev1.PersistentVolumeAccessMode) func(*vmletv1.VirtualMachineInstance) {
	return func(v *vmletv1.VirtualMachineInstance) {
		v.Spec.Volumes = append(v.Spec.Volumes, vmletv1.Volume{Name: "e", VolumeSource: vmletv1.VolumeSource{Ephemeral: &vmletv1.EphemeralVolumeSource{
			PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimSource{ClaimName: "base"}}}})
		if modes != nil {
			v.Status.VolumeStatus = append(v.Status.VolumeStatus, vmletv1.VolumeStatus{Name: "e",
				PersistentVolumeClaimInfo: &vmletv1.PersistentVolumeClaimInfo{ClaimName: "base", AccessModes: modes}})
		}
	}
}

func TestAdmit(t *testing.T) {
	migratable := func(status metav1.ConditionStatus, reason string) func(*vmletv1.VirtualMachineInstance) {
		return func(v *vmletv1.VirtualMachineInstance) {
			v.Status.Conditions = []metav1.Condition{{Type: vmletv1.VirtualMachineInstanceIsMigratable, Status: status, Reason: reason, Message: "m"}}
		}
	}
	now := metav1.Now()
	for _, tc := range []struct {
		name   string
		vmi    *vmletv1.VirtualMachineInstance
		others []string
		want   string
	}{
		{"runs and is migratable", running(migratable(metav1.ConditionTrue, ReasonMigratable)), nil, ""},
		{"no condition yet: judged from the spec", running(), nil, ""},
		{"missing", nil, nil, ReasonVMINotFound},
		{"pending", running(func(v *vmletv1.VirtualMachineInstance) { v.Status.Phase = vmletv1.Pending }), nil, ReasonVMINotRunning},
		{"deleting", running(func(v *vmletv1.VirtualMachineInstance) { v.DeletionTimestamp = &now }), nil, ReasonVMIDeleting},
		{"not migratable", running(migratable(metav1.ConditionFalse, ReasonDisksNotMigratable)), nil, ReasonNotMigratable},
		{"another migration", running(), []string{"m1"}, ReasonInFlight},
		{"state of another migration", running(func(v *vmletv1.VirtualMachineInstance) {
			v.Status.MigrationState = &vmletv1.VirtualMachineInstanceMigrationState{MigrationUID: "u1"}
		}), nil, ReasonInFlight},
		{"state of an ended migration", running(func(v *vmletv1.VirtualMachineInstance) {
			v.Status.MigrationState = &vmletv1.VirtualMachineInstanceMigrationState{MigrationUID: "u1", Completed: true}
		}), nil, ""},
		{"paused guests migrate", running(func(v *vmletv1.VirtualMachineInstance) { v.Spec.Paused = true }), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Admit(tc.vmi, tc.others)
			if r.Reason != tc.want || (tc.want != "" && r.Message == "") {
				t.Fatalf("Admit = %+v, want reason %q", r, tc.want)
			}
		})
	}
}

func TestSlots(t *testing.T) {
	def := vmletv1.MigrationConfiguration{}
	for _, tc := range []struct {
		cfg             vmletv1.MigrationConfiguration
		running, onNode int
		ok              bool
	}{
		{def, 0, 0, true}, {def, 4, 1, true}, {def, 5, 0, false}, {def, 3, 2, false},
		{vmletv1.MigrationConfiguration{ParallelOutboundMigrationsPerNode: ptr.To[uint32](3)}, 3, 2, true},
	} {
		if ok, why := Slots(tc.cfg, tc.running, tc.onNode); ok != tc.ok || (!ok && why == "") {
			t.Errorf("Slots(%d, %d) = %v %q, want %v", tc.running, tc.onNode, ok, why, tc.ok)
		}
	}
}

func TestProgress(t *testing.T) {
	now := metav1.Now()
	st := func(m func(*vmletv1.VirtualMachineInstanceMigrationState)) *vmletv1.VirtualMachineInstanceMigrationState {
		s := &vmletv1.VirtualMachineInstanceMigrationState{MigrationUID: "u", SourceNode: "a", TargetNode: "b"}
		m(s)
		return s
	}
	for _, tc := range []struct {
		name string
		ms   *vmletv1.VirtualMachineInstanceMigrationState
		node string
		want vmletv1.VirtualMachineInstanceMigrationPhase
	}{
		{"lost", nil, "a", vmletv1.MigrationFailed},
		{"scheduled", st(func(*vmletv1.VirtualMachineInstanceMigrationState) {}), "a", vmletv1.MigrationScheduled},
		{"preparing", st(func(s *vmletv1.VirtualMachineInstanceMigrationState) { s.TargetNodeDomainDetected = true }), "a", vmletv1.MigrationPreparingTarget},
		{"target ready", st(func(s *vmletv1.VirtualMachineInstanceMigrationState) { s.TargetNodeAddress = "10.0.0.2" }), "a", vmletv1.MigrationTargetReady},
		{"running", st(func(s *vmletv1.VirtualMachineInstanceMigrationState) {
			s.TargetNodeAddress, s.StartTimestamp = "x", &now
		}), "a", vmletv1.MigrationRunning},
		{"completed, not taken over", st(func(s *vmletv1.VirtualMachineInstanceMigrationState) { s.StartTimestamp, s.Completed = &now, true }), "a", vmletv1.MigrationRunning},
		{"succeeded", st(func(s *vmletv1.VirtualMachineInstanceMigrationState) {
			s.StartTimestamp, s.Completed, s.TargetNodeDomainReadyTimestamp = &now, true, &now
		}), "b", vmletv1.MigrationSucceeded},
		{"failed", st(func(s *vmletv1.VirtualMachineInstanceMigrationState) { s.StartTimestamp, s.Failed = &now, true }), "a", vmletv1.MigrationFailed},
	} {
		if got := Progress(tc.ms, tc.node); got != tc.want {
			t.Errorf("%s: Progress = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestAdvance(t *testing.T) {
	P := func(ps ...vmletv1.VirtualMachineInstanceMigrationPhase) []vmletv1.VirtualMachineInstanceMigrationPhase {
		return ps
	}
	for _, tc := range []struct {
		cur, next vmletv1.VirtualMachineInstanceMigrationPhase
		want      []vmletv1.VirtualMachineInstanceMigrationPhase
	}{
		{"", vmletv1.MigrationPending, P(vmletv1.MigrationPending)},
		{vmletv1.MigrationScheduled, vmletv1.MigrationRunning, P(vmletv1.MigrationPreparingTarget, vmletv1.MigrationTargetReady, vmletv1.MigrationRunning)},
		{vmletv1.MigrationRunning, vmletv1.MigrationScheduled, nil},
		{vmletv1.MigrationRunning, vmletv1.MigrationSucceeded, P(vmletv1.MigrationSucceeded)},
		{vmletv1.MigrationPending, vmletv1.MigrationFailed, P(vmletv1.MigrationFailed)},
		{vmletv1.MigrationFailed, vmletv1.MigrationSucceeded, nil},
	} {
		if d := cmp.Diff(tc.want, Advance(tc.cur, tc.next)); d != "" {
			t.Errorf("Advance(%s, %s) (-want +got):\n%s", tc.cur, tc.next, d)
		}
	}
}

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig("")
	if err != nil {
		t.Fatal(err)
	}
	zero := resource.MustParse("0")
	want := vmletv1.MigrationConfiguration{
		ParallelMigrationsPerCluster: ptr.To[uint32](5), ParallelOutboundMigrationsPerNode: ptr.To[uint32](2),
		BandwidthPerMigration: &zero, CompletionTimeoutPerGiB: ptr.To[int64](150), ProgressTimeout: ptr.To[int64](150),
		UnsafeMigrationOverride: ptr.To(false), AllowAutoConverge: ptr.To(false), AllowPostCopy: ptr.To(false),
		AllowWorkloadDisruption: ptr.To(false), DisableTLS: ptr.To(false), MatchSELinuxLevelOnMigration: ptr.To(true),
	}
	if d := cmp.Diff(want, c); d != "" {
		t.Fatalf("defaults (-want +got):\n%s", d)
	}
	c, err = ParseConfig("bandwidthPerMigration: 64Mi\nprogressTimeout: 5\ndisableTLS: true\n")
	if err != nil {
		t.Fatal(err)
	}
	if c.BandwidthPerMigration.Value() != 64<<20 || *c.ProgressTimeout != 5 || !*c.DisableTLS || *c.CompletionTimeoutPerGiB != 150 {
		t.Fatalf("parsed %+v", c)
	}
	for doc, want := range map[string]string{
		"progresTimeout: 5":               "unknown field",
		"progressTimeout: 0":              "must be positive",
		"bandwidthPerMigration: -1":       "negative",
		"network: migration-net":          "not supported",
		"parallelMigrationsPerCluster: 0": "at least 1",
	} {
		if _, err := ParseConfig(doc); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseConfig(%q) = %v, want an error containing %q", doc, err, want)
		}
	}
}

// TestAdmitEvacuation: an evacuation migration is refused once its vmi left the drained node;
// other migrations and a vmi still there pass.
func TestAdmitEvacuation(t *testing.T) {
	evac := &vmletv1.VirtualMachineInstanceMigration{}
	evac.Annotations = map[string]string{AnnotationEvacuation: "node-a"}
	on := func(node string) *vmletv1.VirtualMachineInstance {
		v := &vmletv1.VirtualMachineInstance{}
		v.Status.NodeName = node
		return v
	}
	for _, tc := range []struct {
		m    *vmletv1.VirtualMachineInstanceMigration
		vmi  *vmletv1.VirtualMachineInstance
		want string
	}{
		{evac, on("node-a"), ""},
		{evac, on("node-b"), ReasonLeftNode},
		{evac, nil, ""}, // Admit says VMINotFound
		{&vmletv1.VirtualMachineInstanceMigration{}, on("node-b"), ""},
	} {
		if got := AdmitEvacuation(tc.m, tc.vmi).Reason; got != tc.want {
			t.Errorf("AdmitEvacuation(%v, %v) = %q, want %q", tc.m.Annotations, tc.vmi, got, tc.want)
		}
	}
}

// TestMigratableClaims: a claim's recorded access modes decide (ReadWriteMany is shared; else
// KubeVirt's message); a claim with none recorded is node-local (local mode).
func TestMigratableClaims(t *testing.T) {
	withClaim := func(dv bool, modes ...corev1.PersistentVolumeAccessMode) *vmletv1.VirtualMachineInstance {
		return running(func(v *vmletv1.VirtualMachineInstance) {
			src := vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
				PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: "pvc"}}}
			if dv {
				src = vmletv1.VolumeSource{DataVolume: &vmletv1.DataVolumeSource{Name: "pvc"}}
			}
			v.Spec.Volumes = []vmletv1.Volume{{Name: "c", VolumeSource: src}}
			if modes != nil {
				v.Status.VolumeStatus = []vmletv1.VolumeStatus{{Name: "c", PersistentVolumeClaimInfo: &vmletv1.PersistentVolumeClaimInfo{ClaimName: "pvc", AccessModes: modes}}}
			}
		})
	}
	notShared := Verdict{Reason: ReasonDisksNotMigratable,
		Message: "cannot migrate VMI: PVC pvc is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"}
	for _, tc := range []struct {
		name string
		vmi  *vmletv1.VirtualMachineInstance
		want Verdict
	}{
		{"ReadWriteMany", withClaim(false, corev1.ReadWriteOnce, corev1.ReadWriteMany), Verdict{OK: true, Reason: ReasonMigratable, Method: vmletv1.LiveMigration}},
		{"dataVolume ReadWriteMany", withClaim(true, corev1.ReadWriteMany), Verdict{OK: true, Reason: ReasonMigratable, Method: vmletv1.LiveMigration}},
		{"ReadWriteOnce", withClaim(false, corev1.ReadWriteOnce), notShared},
		{"dataVolume ReadWriteOncePod", withClaim(true, corev1.ReadWriteOncePod), notShared},
		{"none recorded", withClaim(false), Verdict{Reason: ReasonDisksNotMigratable,
			Message: "cannot migrate: claim pvc is this node's own (no access modes recorded: not a ReadWriteMany claim, nor one every node shares; vmlet does not copy claims)"}},
		{"dataVolume, none recorded", withClaim(true), Verdict{Reason: ReasonDisksNotMigratable,
			Message: "cannot migrate: dataVolume pvc is this node's own (no access modes recorded: not a ReadWriteMany claim, nor one every node shares; vmlet does not copy claims)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, Migratable(tc.vmi)); d != "" {
				t.Errorf("Migratable (-want +got):\n%s", d)
			}
		})
	}
}
