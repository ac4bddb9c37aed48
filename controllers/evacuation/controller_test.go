package evacuation_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/evacuation"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestController drives the evacuation controller's Reconcile against a real API server, one
// pass at a time (the test plays the migration controller and the agents by writing their
// statuses): nothing before the taint; with it, migrations for as many migratable VMIs as the
// slots allow (the cluster default LiveMigrate from the ConfigMap counting for a VMI without a
// strategy), no duplicates on later passes, the blocked and evicted VMIs marked with their
// reasons and Events, None untouched, External only marked; a failed migration's VMI backs
// off while its slot goes to the next one, and is retried after the back-off; a VMI that
// left has its mark cleared; untainting clears the marks.
func TestController(t *testing.T) {
	prereq.APIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.Client
	now := time.Now()
	rec := events.NewFakeRecorder(100)
	ec := &evacuation.Controller{Client: c, APIReader: c, Recorder: rec, Now: func() time.Time { return now }}

	for _, o := range []client.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: migration.ConfigNamespace}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: migration.ConfigNamespace, Name: migration.ConfigName},
			Data: map[string]string{evacuation.ConfigKey: "LiveMigrate"}},
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	const ns = "default"
	type spec struct {
		strategy   vmletv1.EvictionStrategy
		migratable bool
		node       string
	}
	lm, ifp := vmletv1.EvictionStrategyLiveMigrate, vmletv1.EvictionStrategyLiveMigrateIfPossible
	vmis := map[string]spec{
		"mig-a": {lm, true, "n1"}, "mig-b": {ifp, true, "n1"}, "mig-c": {lm, true, "n1"},
		"stuck": {lm, false, "n1"}, "ifp": {ifp, false, "n1"}, "none": {vmletv1.EvictionStrategyNone, true, "n1"},
		"ext": {vmletv1.EvictionStrategyExternal, true, "n1"}, "unset": {"", true, "n1"}, "on-n2": {lm, true, "n2"},
	}
	for name, s := range vmis {
		v := &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if s.strategy != "" {
			v.Spec.EvictionStrategy = ptr.To(s.strategy)
		}
		q := resource.MustParse("128Mi")
		v.Spec.Domain.Memory = &vmletv1.Memory{Guest: &q}
		if err := c.Create(ctx, v); err != nil {
			t.Fatal(err)
		}
		st, reason := metav1.ConditionTrue, migration.ReasonMigratable
		if !s.migratable {
			st, reason = metav1.ConditionFalse, migration.ReasonInterfaceNotMigratable
		}
		v.Status.NodeName, v.Status.Phase = s.node, vmletv1.Running
		v.Status.Conditions = []metav1.Condition{{Type: vmletv1.VirtualMachineInstanceIsMigratable, Status: st, Reason: reason,
			Message: "test", LastTransitionTime: metav1.Now()}}
		if err := c.Status().Update(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	get := func(name string) *vmletv1.VirtualMachineInstance {
		t.Helper()
		v := &vmletv1.VirtualMachineInstance{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	reconcile := func(node string) ctrl.Result {
		t.Helper()
		res, err := ec.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: node}})
		if err != nil {
			t.Fatalf("reconcile %s: %v", node, err)
		}
		return res
	}
	// migrations are the evacuation migrations per VMI, oldest first.
	migrations := func() map[string][]vmletv1.VirtualMachineInstanceMigration {
		t.Helper()
		var l vmletv1.VirtualMachineInstanceMigrationList
		if err := c.List(ctx, &l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		out := map[string][]vmletv1.VirtualMachineInstanceMigration{}
		for _, m := range l.Items {
			if !strings.HasPrefix(m.Name, evacuation.GenerateName) || m.Annotations[evacuation.AnnotationEvacuation] != "n1" || m.Labels[evacuation.LabelVMIName] != m.Spec.VMIName {
				t.Errorf("migration %s: metadata %+v", m.Name, m.ObjectMeta)
			}
			out[m.Spec.VMIName] = append(out[m.Spec.VMIName], m)
		}
		for _, ms := range out {
			slices.SortFunc(ms, func(a, b vmletv1.VirtualMachineInstanceMigration) int {
				return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
			})
		}
		return out
	}
	migrated := func() string {
		var names []string
		for n, ms := range migrations() {
			for range ms {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		return strings.Join(names, " ")
	}
	marks := func() string {
		var b []string
		for _, n := range []string{"ext", "ifp", "mig-a", "mig-b", "mig-c", "none", "on-n2", "stuck", "unset"} {
			b = append(b, n+"="+get(n).Status.EvacuationNodeName)
		}
		return strings.Join(b, " ")
	}
	taint := func(on bool) {
		t.Helper()
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: "n1"}, n); err != nil {
			t.Fatal(err)
		}
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == evacuation.TaintKey })
		if on {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: evacuation.TaintKey, Effect: corev1.TaintEffectNoSchedule})
		}
		if err := c.Update(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	endMigration := func(m *vmletv1.VirtualMachineInstanceMigration, phase vmletv1.VirtualMachineInstanceMigrationPhase) {
		t.Helper()
		end := metav1.NewTime(now)
		m.Status.Phase = phase
		m.Status.MigrationState = &vmletv1.VirtualMachineInstanceMigrationState{SourceNode: "n1", EndTimestamp: &end,
			Failed: phase == vmletv1.MigrationFailed, Completed: phase == vmletv1.MigrationSucceeded}
		if err := c.Status().Update(ctx, m); err != nil {
			t.Fatal(err)
		}
	}

	// Not drained: nothing.
	reconcile("n1")
	if got := migrated(); got != "" {
		t.Fatalf("untainted node: migrations for %s", got)
	}
	unmarked := "ext= ifp= mig-a= mig-b= mig-c= none= on-n2= stuck= unset="
	if got := marks(); got != unmarked {
		t.Fatalf("untainted node marks: %s", got)
	}

	// Drained: two slots (parallelOutboundMigrationsPerNode 2), in name order.
	taint(true)
	res := reconcile("n1")
	if got := migrated(); got != "mig-a mig-b" {
		t.Fatalf("drained: migrations for %q, want mig-a mig-b", got)
	}
	if res.RequeueAfter != 5*time.Second {
		t.Errorf("throttled VMIs wait: RequeueAfter %s, want 5s", res.RequeueAfter)
	}
	want := "ext=n1 ifp=n1 mig-a=n1 mig-b=n1 mig-c=n1 none= on-n2= stuck=n1 unset=n1"
	if got := marks(); got != want {
		t.Errorf("drained marks:\n got %s\nwant %s", got, want)
	}
	if c := meta.FindStatusCondition(get("stuck").Status.Conditions, vmletv1.VirtualMachineInstanceEvacuationBlocked); c == nil || c.Status != metav1.ConditionTrue ||
		!strings.Contains(c.Message, migration.ReasonInterfaceNotMigratable) {
		t.Errorf("stuck: EvacuationBlocked %+v", c)
	}
	if c := meta.FindStatusCondition(get("ifp").Status.Conditions, vmletv1.VirtualMachineInstanceDisruptionTarget); c == nil || c.Status != metav1.ConditionTrue || c.Reason != "Evicted" {
		t.Errorf("ifp: DisruptionTarget %+v", c)
	}
	for _, n := range []string{"mig-a", "none", "ext", "unset"} {
		v := get(n)
		if meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceDisruptionTarget) != nil ||
			meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceEvacuationBlocked) != nil {
			t.Errorf("%s: conditions %+v", n, v.Status.Conditions)
		}
	}
	// A second pass creates nothing more (both migrations pending: no slot).
	reconcile("n1")
	if got := migrated(); got != "mig-a mig-b" {
		t.Fatalf("second pass: migrations for %q", got)
	}
	var evs []string
	for len(rec.Events) > 0 {
		evs = append(evs, <-rec.Events)
	}
	for _, w := range []string{"Warning EvacuationBlocked evictionStrategy LiveMigrate but the VMI cannot migrate",
		"Warning Evicted node n1 is drained and the VMI cannot migrate", "Normal SuccessfulCreate Created Migration vmlet-evacuation-"} {
		if !slices.ContainsFunc(evs, func(e string) bool { return strings.HasPrefix(e, w) }) {
			t.Errorf("no Event %q in %q", w, evs)
		}
	}
	if n := len(slices.DeleteFunc(slices.Clone(evs), func(e string) bool { return !strings.Contains(e, "EvacuationBlocked") })); n != 1 {
		t.Errorf("%d EvacuationBlocked Events over two passes, want 1", n)
	}

	// mig-a's migration fails: it backs off (20 s), its slot goes to mig-c.
	endMigration(&migrations()["mig-a"][0], vmletv1.MigrationFailed)
	res = reconcile("n1")
	if got := migrated(); got != "mig-a mig-b mig-c" {
		t.Fatalf("after mig-a failed: migrations for %q, want mig-a (failed) mig-b mig-c", got)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > evacuation.BackoffInitial {
		t.Errorf("back-off: RequeueAfter %s", res.RequeueAfter)
	}
	// mig-b's succeeds and it runs on n2; 21 s later mig-a is retried in the slot mig-b freed.
	endMigration(&migrations()["mig-b"][0], vmletv1.MigrationSucceeded)
	v := get("mig-b")
	v.Status.NodeName = "n2"
	if err := c.Status().Update(ctx, v); err != nil {
		t.Fatal(err)
	}
	now = now.Add(evacuation.BackoffInitial + time.Second)
	reconcile("n1")
	if got := migrated(); got != "mig-a mig-a mig-b mig-c" {
		t.Fatalf("after the back-off: migrations for %q, want mig-a twice", got)
	}
	reconcile("n2")
	if got := get("mig-b").Status.EvacuationNodeName; got != "" {
		t.Errorf("mig-b on n2: evacuationNodeName %q, want cleared", got)
	}

	// Untainted: the marks and the blocked condition go.
	taint(false)
	reconcile("n1")
	if got := marks(); got != unmarked {
		t.Errorf("untainted marks:\n got %s\nwant %s", got, unmarked)
	}
	if c := meta.FindStatusCondition(get("stuck").Status.Conditions, vmletv1.VirtualMachineInstanceEvacuationBlocked); c != nil {
		t.Errorf("stuck after untaint: %+v", c)
	}

	// A misspelt cluster default fails the pass, naming the key.
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: migration.ConfigNamespace, Name: migration.ConfigName}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data[evacuation.ConfigKey] = "LiveMigrateAlways"
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	taint(true)
	if _, err := ec.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "n1"}}); err == nil || !strings.Contains(err.Error(), "key evictionStrategy") {
		t.Errorf("bad evictionStrategy: %v", err)
	}
}
