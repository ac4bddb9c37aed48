package kubeletsim

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/vmlet/vmlet/nodeagent/deviceplugin"
)

// nodeDevices publishes a Kubelet's device plugin resources in its Node's status (capacity and
// allocatable), as the kubelet does for the plugins registered with it.
type nodeDevices struct {
	k     *Kubelet
	names []string
	count int64
}

// setupDevices registers the controller that advertises k's devices on its Node: k.Devices, or
// what the node agent's device plugin advertises on this machine.
func (k *Kubelet) setupDevices(mgr ctrl.Manager) error {
	d := &nodeDevices{k: k, names: k.Devices, count: int64(k.DeviceCount)}
	if d.names == nil {
		for _, r := range deviceplugin.Select(deviceplugin.Probe()) {
			d.names = append(d.names, r.Name)
		}
	}
	if d.count == 0 {
		d.count = deviceplugin.DefaultCount
	}
	if len(d.names) == 0 {
		return nil
	}
	isNode := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == k.NodeName })
	return ctrl.NewControllerManagedBy(mgr).Named("sim-kubelet-devices").
		For(&corev1.Node{}, builder.WithPredicates(isNode)).Complete(d)
}

// Reconcile puts the device resources into the Node's status when they are missing.
// Equivalent to the kubelet's node status update after a device plugin registered.
func (d *nodeDevices) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	node := &corev1.Node{}
	if err := d.k.Client.Get(ctx, req.NamespacedName, node); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	patch := client.MergeFrom(node.DeepCopy())
	changed := false
	for _, n := range d.names {
		want := *resource.NewQuantity(d.count, resource.DecimalSI)
		for _, l := range []*corev1.ResourceList{&node.Status.Capacity, &node.Status.Allocatable} {
			if q, ok := (*l)[corev1.ResourceName(n)]; ok && q.Cmp(want) == 0 {
				continue
			}
			if *l == nil {
				*l = corev1.ResourceList{}
			}
			(*l)[corev1.ResourceName(n)] = want
			changed = true
		}
	}
	if !changed {
		return ctrl.Result{}, nil
	}
	if err := d.k.Client.Status().Patch(ctx, node, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("advertise devices: %w", err)
	}
	return ctrl.Result{}, nil
}

// insufficient names the extended resources (device plugin resources: names with a domain
// that is not kubernetes.io's) pod's containers ask for beyond what node allocates, as
// kube-scheduler's NodeResourcesFit reports them ("Insufficient NAME"). Other pods' use is
// not counted: vmlet's devices are shared (DefaultCount per node).
func insufficient(pod *corev1.Pod, node *corev1.Node) []string {
	var out []string
	for _, c := range pod.Spec.Containers {
		for n, q := range c.Resources.Limits {
			s := string(n)
			if !strings.Contains(s, "/") || strings.Contains(s, "kubernetes.io/") {
				continue
			}
			if have, ok := node.Status.Allocatable[n]; !ok || have.Cmp(q) < 0 {
				out = append(out, "Insufficient "+s)
			}
		}
	}
	return out
}
