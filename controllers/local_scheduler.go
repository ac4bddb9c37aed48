package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/controllers/vmistatus"
)

// LocalScheduler is local mode's cluster controller: with no kubelet there are no launcher
// pods, so it places every new VMI on one of the local nodes by setting status.nodeName
// (PickNode: a node matching the VMI's nodeSelector, the one with the fewest VMIs that have
// not ended).
type LocalScheduler struct {
	Client   client.Client
	Recorder events.EventRecorder
	// NodeReader reads the Nodes' taints and labels for each decision; nil means Client. Give it
	// the manager's API reader: the cache can lag behind an uncordon, and a VMI created right
	// after it was placed as if the node were still drained (TestLocalDrain in CI).
	NodeReader client.Reader
	// Nodes are the nodes to place VMIs on (`vmlet local --nodes N`). Empty means the single
	// node NodeName with NodeLabels.
	Nodes      []LocalNode
	NodeName   string
	NodeLabels map[string]string

	mu sync.Mutex
	// placed remembers the nodes this scheduler chose until its cache shows them, so that
	// VMIs created together spread although the cache lags behind the status updates.
	placed map[types.UID]string
}

// LocalNode is a node the local scheduler may place VMIs on.
type LocalNode struct {
	Name   string
	Labels map[string]string
}

// NodeCandidate is a node as PickNode weighs it.
type NodeCandidate struct {
	Name   string
	Labels map[string]string
	// VMIs is how many VMIs on the node have not ended (not Succeeded or Failed).
	VMIs int
	// Taints are the Node's taints (spec.taints).
	Taints []corev1.Taint
}

// Untolerated is the first of taints with effect NoSchedule or NoExecute that none of
// tolerations tolerates (kube-scheduler's TaintToleration filter; PreferNoSchedule only weighs
// there and is ignored here), nil when there is none. The drain taint
// (vmlet.dev/drain:NoSchedule) is one such taint. Pure.
func Untolerated(taints []corev1.Taint, tolerations []corev1.Toleration) *corev1.Taint {
	for i := range taints {
		t := &taints[i]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		tolerated := false
		for j := range tolerations {
			if tolerations[j].ToleratesTaint(logr.Discard(), t, false) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return t
		}
	}
	return nil
}

// localTolerations are what every VMI tolerates in PickNode: the taints the node lifecycle
// controller keeps in step with a Node's Ready condition (node.kubernetes.io/not-ready and
// unreachable). Local mode runs no such controller: the API server's TaintNodesByCondition
// adds not-ready to every Node it registers and nothing would ever remove it. Whether a local
// node can take VMIs is its agent's heartbeat (LabelSchedulable).
var localTolerations = []corev1.Toleration{
	{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists},
	{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists},
}

// PickNode chooses the node for vmi among nodes: of those whose labels match the VMI's
// nodeSelector, that are not labelled LabelSchedulable=false (as launcher pods select
// schedulable nodes), that have no NoSchedule or NoExecute taint the VMI does not tolerate
// (Untolerated with its spec.tolerations and localTolerations: a drained node among them) and
// that are not exclude (a migration's source; "" excludes none), the one with
// the fewest VMIs, ties broken by name. With no such node it returns "" and why. Pure.
func PickNode(nodes []NodeCandidate, vmi *vmletv1.VirtualMachineInstance, exclude string) (string, string) {
	sel := labels.SelectorFromSet(vmi.Spec.NodeSelector)
	tolerations := append(slices.Clone(localTolerations), vmi.Spec.Tolerations...)
	var best *NodeCandidate
	var unschedulable, tainted []string
	for i := range nodes {
		n := &nodes[i]
		if n.Name != exclude && n.Labels[LabelSchedulable] == "false" {
			unschedulable = append(unschedulable, n.Name)
			continue
		}
		if t := Untolerated(n.Taints, tolerations); n.Name != exclude && t != nil {
			tainted = append(tainted, fmt.Sprintf("%s (taint %s)", n.Name, taintString(t)))
			continue
		}
		if n.Name == exclude || !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		if best == nil || n.VMIs < best.VMIs || n.VMIs == best.VMIs && n.Name < best.Name {
			best = n
		}
	}
	if best != nil {
		return best.Name, ""
	}
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if n.Name != exclude && n.Labels[LabelSchedulable] != "false" && Untolerated(n.Taints, tolerations) == nil {
			names = append(names, n.Name)
		}
	}
	sort.Strings(names)
	switch {
	case len(tainted) > 0 && len(names) == 0:
		sort.Strings(tainted)
		return "", fmt.Sprintf("no schedulable node: %v have taints the vmi does not tolerate", tainted)
	case len(unschedulable) > 0 && len(names) == 0:
		sort.Strings(unschedulable)
		return "", fmt.Sprintf("no schedulable node: %v %s=false (their vmlet agents are not responsive)", unschedulable, LabelSchedulable)
	case len(names) == 0 && exclude != "":
		return "", fmt.Sprintf("no node other than %s", exclude)
	case len(names) == 1:
		return "", fmt.Sprintf("node %s does not match nodeSelector %s", names[0], sel)
	default:
		return "", fmt.Sprintf("none of the nodes %v matches nodeSelector %s", names, sel)
	}
}

// SetupWithManager registers the scheduler: VMIs, and Nodes, whose changes (a taint removed,
// a node schedulable again) wake the VMIs that wait for a node.
func (s *LocalScheduler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("vmi-local-scheduler").For(&vmletv1.VirtualMachineInstance{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(s.unscheduled)).
		Complete(s)
}

// unscheduled lists the VMIs that wait for a node.
func (s *LocalScheduler) unscheduled(ctx context.Context, _ client.Object) []reconcile.Request {
	var l vmletv1.VirtualMachineInstanceList
	if err := s.Client.List(ctx, &l); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, v := range l.Items {
		if v.Status.NodeName == "" && !vmistatus.IsFinal(v.Status.Phase) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&v)})
		}
	}
	return out
}

// Reconcile assigns unscheduled VMIs.
func (s *LocalScheduler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	vmi := &vmletv1.VirtualMachineInstance{}
	if err := s.Client.Get(ctx, req.NamespacedName, vmi); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if vmi.Status.NodeName != "" || vmistatus.IsFinal(vmi.Status.Phase) || !vmi.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	nodes, err := s.candidates(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	before := vmi.Status.DeepCopy()
	vmistatus.SetPhase(vmi, vmletv1.Pending)
	node, why := PickNode(nodes, vmi, "")
	if node == "" {
		vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, vmistatus.ReasonUnschedulable, why)
	} else {
		vmi.Status.NodeName = node
		vmistatus.SetPhase(vmi, vmletv1.Scheduled)
	}
	if equality.Semantic.DeepEqual(before, &vmi.Status) {
		return ctrl.Result{}, nil
	}
	if err := s.Client.Status().Update(ctx, vmi); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil // deleted meanwhile: nothing to place
		}
		return ctrl.Result{}, fmt.Errorf("update status: %w", err)
	}
	if node != "" {
		s.placed[vmi.UID] = node
		s.Recorder.Eventf(vmi, nil, "Normal", string(vmistatus.ReasonScheduled), "Schedule", "assigned to node %s", node)
	}
	return ctrl.Result{}, nil
}

// candidates counts each node's VMIs that have not ended, from the cache and what this
// scheduler placed that the cache does not show yet. Call with s.mu held.
func (s *LocalScheduler) candidates(ctx context.Context) ([]NodeCandidate, error) {
	nodes := s.Nodes
	if len(nodes) == 0 {
		nodes = []LocalNode{{Name: s.NodeName, Labels: s.NodeLabels}}
	}
	var l vmletv1.VirtualMachineInstanceList
	if err := s.Client.List(ctx, &l); err != nil {
		return nil, fmt.Errorf("list VMIs: %w", err)
	}
	if s.placed == nil {
		s.placed = map[types.UID]string{}
	}
	count := map[string]int{}
	pending := map[types.UID]string{}
	for _, v := range l.Items {
		node := v.Status.NodeName
		if p, ok := s.placed[v.UID]; ok && node == "" {
			node, pending[v.UID] = p, p
		}
		if node != "" && !vmistatus.IsFinal(v.Status.Phase) {
			count[node]++
		}
	}
	s.placed = pending // seen placed by the cache, or gone: forgotten
	out := make([]NodeCandidate, len(nodes))
	for i, n := range nodes {
		out[i] = NodeCandidate{Name: n.Name, Labels: n.Labels, VMIs: count[n.Name]}
		// The Node's own LabelSchedulable, where someone marked it unschedulable, and its
		// taints (a drain).
		node := &corev1.Node{}
		err := s.nodeReader().Get(ctx, client.ObjectKey{Name: n.Name}, node)
		if err == nil {
			out[i].Taints = node.Spec.Taints
		}
		if err == nil && node.Labels[LabelSchedulable] == "false" {
			out[i].Labels = maps.Clone(n.Labels)
			if out[i].Labels == nil {
				out[i].Labels = map[string]string{}
			}
			out[i].Labels[LabelSchedulable] = "false"
		}
	}
	return out, nil
}

func (s *LocalScheduler) nodeReader() client.Reader {
	if s.NodeReader != nil {
		return s.NodeReader
	}
	return s.Client
}

// PickTarget chooses the node a migration of req.VMI goes to: as PickNode with the migration's
// addedNodeSelector, its current node excluded (migration.Picker). The target's agent starts its launcher: no pod is named.
func (s *LocalScheduler) PickTarget(ctx context.Context, req migration.TargetRequest) (migration.Target, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	nodes, err := s.candidates(ctx)
	if err != nil {
		return migration.Target{}, err
	}
	vmi := req.VMI
	if added := req.Migration.Spec.AddedNodeSelector; len(added) > 0 {
		vmi = vmi.DeepCopy()
		vmi.Spec.NodeSelector = migration.AddNodeSelector(vmi.Spec.NodeSelector, added)
	}
	node, why := PickNode(nodes, vmi, vmi.Status.NodeName)
	if node == "" {
		return migration.Target{}, errors.New(why)
	}
	return migration.Target{Node: node}, nil
}

// taintString is a taint as kubectl writes it: key[=value]:effect.
func taintString(t *corev1.Taint) string {
	if t.Value == "" {
		return t.Key + ":" + string(t.Effect)
	}
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}
