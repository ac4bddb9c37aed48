package evacuation_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/evacuation"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// vmi is a running VMI on node n1 with strategy s ("" = unset) whose LiveMigratable condition
// is migratable.
func vmi(name string, s vmletv1.EvictionStrategy, migratable bool) vmletv1.VirtualMachineInstance {
	v := vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	if s != "" {
		v.Spec.EvictionStrategy = ptr.To(s)
	}
	v.Status.NodeName, v.Status.Phase = "n1", vmletv1.Running
	st, reason := metav1.ConditionTrue, "Migratable"
	if !migratable {
		st, reason = metav1.ConditionFalse, "InterfaceNotLiveMigratable"
	}
	v.Status.Conditions = []metav1.Condition{{Type: vmletv1.VirtualMachineInstanceIsMigratable, Status: st, Reason: reason, Message: "m"}}
	return v
}

func mig(name, vmiName string, phase vmletv1.VirtualMachineInstanceMigrationPhase, created time.Time, evac bool) vmletv1.VirtualMachineInstanceMigration {
	m := vmletv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, CreationTimestamp: metav1.NewTime(created)},
		Spec: vmletv1.VirtualMachineInstanceMigrationSpec{VMIName: vmiName}}
	m.Status.Phase = phase
	if evac {
		m.Annotations = map[string]string{evacuation.AnnotationEvacuation: "n1"}
	}
	if phase == vmletv1.MigrationFailed {
		end := metav1.NewTime(created.Add(10 * time.Second))
		m.Status.MigrationState = &vmletv1.VirtualMachineInstanceMigrationState{Failed: true, EndTimestamp: &end, SourceNode: "n1"}
	}
	return m
}

func actions(ds []evacuation.Decision) string {
	var b []string
	for _, d := range ds {
		b = append(b, d.Name+"="+string(d.Action))
	}
	return strings.Join(b, " ")
}

func TestPlanStrategies(t *testing.T) {
	lm, ifp := vmletv1.EvictionStrategyLiveMigrate, vmletv1.EvictionStrategyLiveMigrateIfPossible
	vmis := []vmletv1.VirtualMachineInstance{
		vmi("a-lm", lm, true), vmi("b-lm-stuck", lm, false), vmi("c-ifp", ifp, true), vmi("d-ifp-stuck", ifp, false),
		vmi("e-none", vmletv1.EvictionStrategyNone, true), vmi("f-external", vmletv1.EvictionStrategyExternal, false),
		vmi("g-unset", "", true),
	}
	ended := vmi("h-ended", lm, true)
	ended.Status.Phase = vmletv1.Succeeded
	vmis = append(vmis, ended)
	for _, tc := range []struct {
		name    string
		drained bool
		def     *vmletv1.EvictionStrategy
		want    string
	}{
		{name: "not drained: nothing", drained: false, def: &lm,
			want: "a-lm=None b-lm-stuck=None c-ifp=None d-ifp-stuck=None e-none=None f-external=None g-unset=None h-ended=None"},
		{name: "drained, no cluster default (None)", drained: true,
			want: "a-lm=Migrate b-lm-stuck=Block c-ifp=Migrate d-ifp-stuck=Shutdown e-none=None f-external=External g-unset=None h-ended=None"},
		{name: "drained, cluster default LiveMigrate applies to the unset one only", drained: true, def: &lm,
			want: "a-lm=Migrate b-lm-stuck=Block c-ifp=Migrate d-ifp-stuck=Shutdown e-none=None f-external=External g-unset=Migrate h-ended=None"},
	} {
		// Enough slots for all.
		cfg := vmletv1.MigrationConfiguration{ParallelOutboundMigrationsPerNode: ptr.To[uint32](10)}
		got := actions(evacuation.Plan(evacuation.Input{Node: "n1", Drained: tc.drained, Default: tc.def, VMIs: vmis, Config: cfg, Now: t0}))
		if got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

// TestPlanMarked: on a cordoned node without the drain taint, the VMIs the eviction webhook
// marked (status.evacuationNodeName = the node) are evacuated as on a drained node, and only
// they; uncordoning ends it.
func TestPlanMarked(t *testing.T) {
	lm := vmletv1.EvictionStrategyLiveMigrate
	marked, stuck, other := vmi("a-marked", lm, true), vmi("b-marked-stuck", lm, false), vmi("c-unmarked", lm, true)
	marked.Status.EvacuationNodeName, stuck.Status.EvacuationNodeName = "n1", "n1"
	vmis := []vmletv1.VirtualMachineInstance{marked, stuck, other}
	got := actions(evacuation.Plan(evacuation.Input{Node: "n1", Cordoned: true, Now: t0, VMIs: vmis}))
	if want := "a-marked=Migrate b-marked-stuck=Block c-unmarked=None"; got != want {
		t.Errorf("cordoned: got %s, want %s", got, want)
	}
	// Uncordoned (kubectl uncordon): the evacuation is off, the marks go.
	got = actions(evacuation.Plan(evacuation.Input{Node: "n1", Now: t0, VMIs: vmis}))
	if want := "a-marked=None b-marked-stuck=None c-unmarked=None"; got != want {
		t.Errorf("uncordoned: got %s, want %s", got, want)
	}
}

func TestPlanMessages(t *testing.T) {
	ds := evacuation.Plan(evacuation.Input{Node: "n1", Drained: true, Now: t0, VMIs: []vmletv1.VirtualMachineInstance{
		vmi("stuck", vmletv1.EvictionStrategyLiveMigrate, false), vmi("gone", vmletv1.EvictionStrategyLiveMigrateIfPossible, false)}})
	if m := ds[1].Message; !strings.Contains(m, "InterfaceNotLiveMigratable") || !strings.Contains(m, "blocks its drain") {
		t.Errorf("blocked message %q names neither the reason nor the drain", m)
	}
	if m := ds[0].Message; !strings.Contains(m, "InterfaceNotLiveMigratable") || !strings.Contains(m, "shuts it down") {
		t.Errorf("shutdown message %q", m)
	}
}

func TestPlanSpecWhenNoCondition(t *testing.T) {
	// The agent has not said yet: judged from the spec (a pod network with the auto bridge is
	// not migratable; no interfaces at all gets KubeVirt's auto-attached bridge).
	v := vmi("fresh", vmletv1.EvictionStrategyLiveMigrate, true)
	v.Status.Conditions = nil
	v.Spec.Networks = []vmletv1.Network{{Name: "default", NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}}
	v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default", InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Bridge: &vmletv1.InterfaceBridge{}}}}
	ds := evacuation.Plan(evacuation.Input{Node: "n1", Drained: true, Now: t0, VMIs: []vmletv1.VirtualMachineInstance{v}})
	if ds[0].Action != evacuation.Block {
		t.Errorf("bridge on the pod network: %s, want Block", ds[0].Action)
	}
}

func TestPlanSlots(t *testing.T) {
	lm := vmletv1.EvictionStrategyLiveMigrate
	vmis := []vmletv1.VirtualMachineInstance{vmi("a", lm, true), vmi("b", lm, true), vmi("c", lm, true), vmi("d", lm, true)}
	for _, tc := range []struct {
		name string
		migs []vmletv1.VirtualMachineInstanceMigration
		cfg  vmletv1.MigrationConfiguration
		want string
	}{
		{name: "default 2 per node", want: "a=Migrate b=Migrate c=Wait d=Wait"},
		{name: "one already migrating: it waits, one more starts", migs: []vmletv1.VirtualMachineInstanceMigration{mig("m1", "b", vmletv1.MigrationRunning, t0, true)},
			want: "a=Migrate b=Wait c=Wait d=Wait"},
		{name: "a pending migration takes a slot too", migs: []vmletv1.VirtualMachineInstanceMigration{
			mig("m1", "a", vmletv1.MigrationPending, t0, true), mig("m2", "b", vmletv1.MigrationPending, t0, false)},
			want: "a=Wait b=Wait c=Wait d=Wait"},
		{name: "cluster-wide limit", cfg: vmletv1.MigrationConfiguration{ParallelMigrationsPerCluster: ptr.To[uint32](1), ParallelOutboundMigrationsPerNode: ptr.To[uint32](5)},
			want: "a=Migrate b=Wait c=Wait d=Wait"},
		{name: "a migration from another node counts cluster-wide only", cfg: vmletv1.MigrationConfiguration{ParallelMigrationsPerCluster: ptr.To[uint32](2)},
			migs: []vmletv1.VirtualMachineInstanceMigration{func() vmletv1.VirtualMachineInstanceMigration {
				m := mig("x", "elsewhere", vmletv1.MigrationRunning, t0, false)
				m.Status.MigrationState = &vmletv1.VirtualMachineInstanceMigrationState{SourceNode: "n2"}
				return m
			}()},
			want: "a=Migrate b=Wait c=Wait d=Wait"},
		{name: "ended migrations free their slots", migs: []vmletv1.VirtualMachineInstanceMigration{
			mig("m1", "a", vmletv1.MigrationSucceeded, t0, true), mig("m2", "zz", vmletv1.MigrationSucceeded, t0, true)},
			want: "a=Migrate b=Migrate c=Wait d=Wait"},
	} {
		got := actions(evacuation.Plan(evacuation.Input{Node: "n1", Drained: true, VMIs: vmis, Migrations: tc.migs, Config: tc.cfg, Now: t0}))
		if got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

func TestPlanMigratingState(t *testing.T) {
	// The vmi carries a migration in flight that this list does not show (a user's).
	v := vmi("a", vmletv1.EvictionStrategyLiveMigrate, true)
	v.Status.MigrationState = &vmletv1.VirtualMachineInstanceMigrationState{MigrationUID: "u1"}
	p := vmi("p", vmletv1.EvictionStrategyLiveMigrate, true)
	p.Status.Phase = vmletv1.Scheduled
	got := actions(evacuation.Plan(evacuation.Input{Node: "n1", Drained: true, VMIs: []vmletv1.VirtualMachineInstance{v, p}, Now: t0}))
	if got != "a=Wait p=Wait" {
		t.Errorf("got %s, want a=Wait p=Wait", got)
	}
}

func TestBackoff(t *testing.T) {
	v := vmi("a", vmletv1.EvictionStrategyLiveMigrate, true)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) }
	f := vmletv1.MigrationFailed
	for _, tc := range []struct {
		name     string
		migs     []vmletv1.VirtualMachineInstanceMigration
		now      time.Time
		want     time.Duration
		wantFail int
	}{
		{name: "none", now: at(0)},
		{name: "one failed, 5 s after its end", migs: []vmletv1.VirtualMachineInstanceMigration{mig("m1", "a", f, at(0), true)},
			now: at(0).Add(15 * time.Second), want: 15 * time.Second, wantFail: 1},
		{name: "one failed, back-off over", migs: []vmletv1.VirtualMachineInstanceMigration{mig("m1", "a", f, at(0), true)},
			now: at(1), want: 0, wantFail: 1},
		{name: "three in a row: 80 s", migs: []vmletv1.VirtualMachineInstanceMigration{mig("m1", "a", f, at(0), true), mig("m2", "a", f, at(1), true), mig("m3", "a", f, at(2), true)},
			now: at(2).Add(10 * time.Second), want: 80 * time.Second, wantFail: 3},
		{name: "a success ends the run", migs: []vmletv1.VirtualMachineInstanceMigration{mig("m1", "a", f, at(0), true), mig("m2", "a", vmletv1.MigrationSucceeded, at(1), true), mig("m3", "a", f, at(2), true)},
			now: at(2).Add(10 * time.Second), want: 20 * time.Second, wantFail: 1},
		{name: "a user's failed migration does not count", migs: []vmletv1.VirtualMachineInstanceMigration{mig("m1", "a", f, at(0), false)},
			now: at(0).Add(10 * time.Second)},
		{name: "another vmi's does not count", migs: []vmletv1.VirtualMachineInstanceMigration{mig("m1", "b", f, at(0), true)},
			now: at(0).Add(10 * time.Second)},
		{name: "capped", migs: func() []vmletv1.VirtualMachineInstanceMigration {
			var ms []vmletv1.VirtualMachineInstanceMigration
			for i := range 10 {
				ms = append(ms, mig("m"+string(rune('a'+i)), "a", f, at(i), true))
			}
			return ms
		}(), now: at(9).Add(10 * time.Second), want: evacuation.BackoffMax, wantFail: 10},
	} {
		got, n := evacuation.Backoff(tc.migs, &v, tc.now)
		if got != tc.want || n != tc.wantFail {
			t.Errorf("%s: Backoff = %s, %d; want %s, %d", tc.name, got, n, tc.want, tc.wantFail)
		}
	}
	// Plan holds a vmi in back-off and says when to look again.
	ds := evacuation.Plan(evacuation.Input{Node: "n1", Drained: true, VMIs: []vmletv1.VirtualMachineInstance{v},
		Migrations: []vmletv1.VirtualMachineInstanceMigration{mig("m1", "a", f, at(0), true)}, Now: at(0).Add(15 * time.Second)})
	if ds[0].Action != evacuation.Wait || ds[0].RetryAfter != 15*time.Second {
		t.Errorf("in back-off: %+v", ds[0])
	}
}

func TestDrainedAndStrategy(t *testing.T) {
	if !evacuation.Drained([]corev1.Taint{{Key: "x", Effect: corev1.TaintEffectNoExecute}, {Key: evacuation.TaintKey, Value: "v", Effect: corev1.TaintEffectNoSchedule}}) {
		t.Error("drain taint with a value: not drained")
	}
	if evacuation.Drained([]corev1.Taint{{Key: evacuation.TaintKey, Effect: corev1.TaintEffectPreferNoSchedule}}) {
		t.Error("PreferNoSchedule drain taint counted")
	}
	for v, want := range map[string]string{"": "<nil>", " LiveMigrate\n": "LiveMigrate", "External": "External", "Migrate": "error"} {
		s, err := evacuation.ParseStrategy(v)
		got := "<nil>"
		switch {
		case err != nil:
			got = "error"
		case s != nil:
			got = string(*s)
		}
		if got != want {
			t.Errorf("ParseStrategy(%q) = %s, want %s", v, got, want)
		}
	}
}

func TestNewMigration(t *testing.T) {
	v := vmi("a", vmletv1.EvictionStrategyLiveMigrate, true)
	m := evacuation.NewMigration(&v, "n1")
	if m.GenerateName != "vmlet-evacuation-" || m.Namespace != "default" || m.Spec.VMIName != "a" ||
		m.Annotations[evacuation.AnnotationEvacuation] != "n1" || m.Labels[evacuation.LabelVMIName] != "a" {
		t.Errorf("NewMigration = %+v", m.ObjectMeta)
	}
}

func TestEviction(t *testing.T) {
	live, ifPossible, external, none := vmletv1.EvictionStrategyLiveMigrate, vmletv1.EvictionStrategyLiveMigrateIfPossible,
		vmletv1.EvictionStrategyExternal, vmletv1.EvictionStrategyNone
	vmi := func(s *vmletv1.EvictionStrategy, migratable bool) *vmletv1.VirtualMachineInstance {
		v := &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm"}}
		v.Spec.EvictionStrategy = s
		v.Status.Phase, v.Status.NodeName = vmletv1.Running, "n1"
		st := metav1.ConditionFalse
		if migratable {
			st = metav1.ConditionTrue
		}
		v.Status.Conditions = []metav1.Condition{{Type: string(vmletv1.VirtualMachineInstanceIsMigratable), Status: st, Reason: "InterfaceNotLiveMigratable", Message: "bridge"}}
		return v
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n1"}}
	target := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n2"}}
	ended := vmi(&live, true)
	ended.Status.Phase = vmletv1.Succeeded
	for _, c := range []struct {
		name    string
		pod     *corev1.Pod
		vmi     *vmletv1.VirtualMachineInstance
		def     *vmletv1.EvictionStrategy
		allowed bool
		mark    string
		says    string
	}{
		{"LiveMigrate, migratable", pod, vmi(&live, true), nil, false, "n1", "Eviction triggered evacuation"},
		{"the cluster's LiveMigrate", pod, vmi(nil, true), &live, false, "n1", "Eviction triggered evacuation"},
		{"LiveMigrate, not migratable", pod, vmi(&live, false), nil, false, "", "cannot migrate (InterfaceNotLiveMigratable: bridge)"},
		{"IfPossible, migratable", pod, vmi(&ifPossible, true), nil, false, "n1", "migrates off node n1"},
		{"IfPossible, not migratable", pod, vmi(&ifPossible, false), nil, true, "", ""},
		{"External", pod, vmi(&external, false), nil, false, "n1", "External"},
		{"None", pod, vmi(&none, true), &live, true, "", ""},
		{"no strategy anywhere", pod, vmi(nil, true), nil, true, "", ""},
		{"a migration target's pod", target, vmi(&live, true), nil, true, "", ""},
		{"an ended VMI", pod, ended, nil, true, "", ""},
		{"no VMI", pod, nil, nil, true, "", ""},
	} {
		v := evacuation.Eviction(c.pod, c.vmi, c.def)
		if v.Allowed != c.allowed || v.Mark != c.mark || !strings.Contains(v.Message, c.says) {
			t.Errorf("%s: %+v; want allowed %v, mark %q, a message with %q", c.name, v, c.allowed, c.mark, c.says)
		}
		if !v.Allowed && v.Code != 429 {
			t.Errorf("%s: code %d, want 429 (kubectl drain retries it)", c.name, v.Code)
		}
	}
}
