package controllers_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/migration"
)

func TestPickNode(t *testing.T) {
	amd := map[string]string{"kubernetes.io/arch": "amd64"}
	gpu := map[string]string{"kubernetes.io/arch": "amd64", "gpu": "yes"}
	nodes := []controllers.NodeCandidate{
		{Name: "n-2", Labels: amd, VMIs: 1},
		{Name: "n-1", Labels: gpu, VMIs: 1},
		{Name: "n-3", Labels: amd, VMIs: 2},
	}
	vmi := func(sel map[string]string, tols []corev1.Toleration) *vmletv1.VirtualMachineInstance {
		v := &vmletv1.VirtualMachineInstance{}
		v.Spec.NodeSelector = sel
		v.Spec.Tolerations = tols
		return v
	}
	dedicated := corev1.Taint{Key: "dedicated", Value: "vms", Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		name    string
		nodes   []controllers.NodeCandidate
		sel     map[string]string
		tols    []corev1.Toleration
		exclude string
		want    string
		wantWhy string
	}{
		{name: "fewest, tie by name", nodes: nodes, want: "n-1"},
		{name: "selector", nodes: nodes, sel: map[string]string{"gpu": "yes"}, want: "n-1"},
		{name: "exclude the source", nodes: nodes, exclude: "n-1", want: "n-2"},
		{name: "fewest wins over name", nodes: []controllers.NodeCandidate{{Name: "a", VMIs: 3}, {Name: "b", VMIs: 0}}, want: "b"},
		{name: "selector excludes all but the source", nodes: nodes, sel: map[string]string{"gpu": "yes"}, exclude: "n-1",
			wantWhy: "none of the nodes [n-2 n-3] matches nodeSelector gpu=yes"},
		{name: "single node", nodes: nodes[2:], sel: map[string]string{"gpu": "yes"}, wantWhy: "node n-3 does not match nodeSelector gpu=yes"},
		{name: "only the source", nodes: nodes[1:2], exclude: "n-1", wantWhy: "no node other than n-1"},
		{name: "unschedulable skipped", nodes: []controllers.NodeCandidate{
			{Name: "a", VMIs: 0, Labels: map[string]string{controllers.LabelSchedulable: "false"}},
			{Name: "b", VMIs: 5, Labels: map[string]string{controllers.LabelSchedulable: "true"}}}, want: "b"},
		{name: "only unschedulable", nodes: []controllers.NodeCandidate{
			{Name: "a", Labels: map[string]string{controllers.LabelSchedulable: "false"}}},
			wantWhy: "no schedulable node: [a] vmlet.dev/schedulable=false (their vmlet agents are not responsive)"},
		{name: "drained node skipped", nodes: []controllers.NodeCandidate{
			{Name: "a", VMIs: 0, Taints: []corev1.Taint{{Key: "vmlet.dev/drain", Effect: corev1.TaintEffectNoSchedule}}},
			{Name: "b", VMIs: 5}}, want: "b"},
		{name: "PreferNoSchedule only weighs", nodes: []controllers.NodeCandidate{
			{Name: "a", VMIs: 0, Taints: []corev1.Taint{{Key: "x", Effect: corev1.TaintEffectPreferNoSchedule}}},
			{Name: "b", VMIs: 5}}, want: "a"},
		{name: "not-ready and unreachable taints: no lifecycle controller in local mode", nodes: []controllers.NodeCandidate{
			{Name: "a", VMIs: 0, Taints: []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule},
				{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}},
			{Name: "b", VMIs: 5}}, want: "a"},
		{name: "only tainted nodes", nodes: []controllers.NodeCandidate{
			{Name: "a", Taints: []corev1.Taint{{Key: "vmlet.dev/drain", Effect: corev1.TaintEffectNoSchedule}}},
			{Name: "b", Taints: []corev1.Taint{{Key: "k", Value: "v", Effect: corev1.TaintEffectNoExecute}}}},
			wantWhy: "no schedulable node: [a (taint vmlet.dev/drain:NoSchedule) b (taint k=v:NoExecute)] have taints the vmi does not tolerate"},
		{name: "migration target: only the source is untainted", nodes: []controllers.NodeCandidate{
			{Name: "a"}, {Name: "b", Taints: []corev1.Taint{{Key: "vmlet.dev/drain", Effect: corev1.TaintEffectNoSchedule}}}},
			exclude: "a", wantWhy: "no schedulable node: [b (taint vmlet.dev/drain:NoSchedule)] have taints the vmi does not tolerate"},
		{name: "toleration admits a tainted node", nodes: []controllers.NodeCandidate{
			{Name: "a", VMIs: 0, Taints: []corev1.Taint{dedicated}}, {Name: "b", VMIs: 5}},
			tols: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "vms", Effect: corev1.TaintEffectNoSchedule}}, want: "a"},
		{name: "toleration of another value", nodes: []controllers.NodeCandidate{
			{Name: "a", VMIs: 0, Taints: []corev1.Taint{dedicated}}, {Name: "b", VMIs: 5}},
			tols: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db"}}, want: "b"},
		{name: "tolerating everything admits a drained node", nodes: []controllers.NodeCandidate{
			{Name: "a", Taints: []corev1.Taint{{Key: "vmlet.dev/drain", Effect: corev1.TaintEffectNoSchedule}}}},
			tols: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, want: "a"},
		{name: "only a tainted node, not tolerated", nodes: []controllers.NodeCandidate{{Name: "a", Taints: []corev1.Taint{dedicated}}},
			tols:    []corev1.Toleration{{Key: "other", Operator: corev1.TolerationOpExists}},
			wantWhy: "no schedulable node: [a (taint dedicated=vms:NoSchedule)] have taints the vmi does not tolerate"},
	} {
		got, why := controllers.PickNode(tc.nodes, vmi(tc.sel, tc.tols), tc.exclude)
		if got != tc.want || tc.wantWhy != "" && why != tc.wantWhy {
			t.Errorf("%s: PickNode = %q, %q; want %q, %q", tc.name, got, why, tc.want, tc.wantWhy)
		}
	}
}

func TestUntolerated(t *testing.T) {
	drain := corev1.Taint{Key: "vmlet.dev/drain", Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		name   string
		taints []corev1.Taint
		tols   []corev1.Toleration
		want   string
	}{
		{name: "none"},
		{name: "drain", taints: []corev1.Taint{drain}, want: "vmlet.dev/drain"},
		{name: "tolerated by key", taints: []corev1.Taint{drain}, tols: []corev1.Toleration{{Key: "vmlet.dev/drain", Operator: corev1.TolerationOpExists}}},
		{name: "toleration of another effect", taints: []corev1.Taint{drain},
			tols: []corev1.Toleration{{Key: "vmlet.dev/drain", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}, want: "vmlet.dev/drain"},
		{name: "PreferNoSchedule", taints: []corev1.Taint{{Key: "p", Effect: corev1.TaintEffectPreferNoSchedule}}},
	} {
		got := ""
		if tt := controllers.Untolerated(tc.taints, tc.tols); tt != nil {
			got = tt.Key
		}
		if got != tc.want {
			t.Errorf("%s: Untolerated = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestPickTargetAddedNodeSelector: local mode's migration picker honours the migration's
// addedNodeSelector (on the local nodes' labels), and says why when no node has them.
func TestPickTargetAddedNodeSelector(t *testing.T) {
	scheme := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{clientgoscheme.AddToScheme, vmletv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	vmi := &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "vm", UID: "u1"}}
	vmi.Status.NodeName, vmi.Status.Phase = "a", vmletv1.Running
	s := &controllers.LocalScheduler{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(vmi).Build(),
		Nodes: []controllers.LocalNode{{Name: "a", Labels: map[string]string{"rack": "1"}}, {Name: "b", Labels: map[string]string{"rack": "1"}},
			{Name: "c", Labels: map[string]string{"rack": "2"}}}}
	pick := func(added map[string]string) (string, error) {
		m := &vmletv1.VirtualMachineInstanceMigration{Spec: vmletv1.VirtualMachineInstanceMigrationSpec{VMIName: "vm", AddedNodeSelector: added}}
		tg, err := s.PickTarget(context.Background(), migration.TargetRequest{Migration: m, VMI: vmi})
		return tg.Node, err
	}
	if n, err := pick(map[string]string{"rack": "2"}); err != nil || n != "c" {
		t.Errorf("rack 2: %q, %v; want c", n, err)
	}
	if n, err := pick(map[string]string{"rack": "1"}); err != nil || n != "b" {
		t.Errorf("rack 1: %q, %v; want b (a is the source)", n, err)
	}
	if n, err := pick(map[string]string{"rack": "3"}); err == nil {
		t.Errorf("rack 3: picked %q, want an error", n)
	}
	if vmi.Spec.NodeSelector != nil {
		t.Errorf("the vmi's nodeSelector changed: %v", vmi.Spec.NodeSelector)
	}
}
