package controllers

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/network"
)

// networkRecheck is how often a VMI waiting for a network looks again.
const networkRecheck = 30 * time.Second

// missingNetworks lists the multus networks of the VMI's (present) interfaces (the non-pod
// networks of spec, nil when it has no interfaces) that this node does not offer.
func (n *NodeNetwork) missingNetworks(spec *network.Spec) []string {
	if spec == nil {
		return nil
	}
	var missing []string
	for _, nw := range spec.Networks {
		if !nw.Pod && !n.offers(nw.Attachment) {
			missing = append(missing, nw.Attachment)
		}
	}
	return missing
}

// waitForNetworks keeps a VMI that has no launcher yet from starting while a network it lists
// cannot be wired (lifecycle.WaitForNetworks), as a launcher pod cannot start without its
// networks in KubeVirt: the VMI stays Scheduled with Synchronized=False, reason
// UnknownNetwork (a Warning event when that becomes true) and is looked at again every
// networkRecheck, so it starts once the node offers the network. A running VMI's new
// interfaces are hotplug's (reconcileNICs): there the VM keeps running.
func (r *VMIReconciler) waitForNetworks(vmi *vmletv1.VirtualMachineInstance, want *translate.Desired) ctrl.Result {
	missing := r.Network.missingNetworks(want.Network)
	msg := fmt.Sprintf("waiting for multus network(s) %s: not offered by this node (it offers %s); the VMI starts when they are",
		strings.Join(missing, ", "), strings.Join(r.Network.secondaryNames(), ", "))
	if c := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized); c == nil || c.Reason != string(vmistatus.ReasonUnknownNetwork) || c.Message != msg {
		r.Recorder.Eventf(vmi, nil, "Warning", string(vmistatus.ReasonUnknownNetwork), "WireNetwork", "%s", msg)
	}
	vmistatus.SetPhase(vmi, vmletv1.Scheduled)
	vmistatus.NotSynchronized(vmi, vmistatus.ReasonUnknownNetwork, msg)
	vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, vmistatus.ReasonUnknownNetwork, msg)
	return ctrl.Result{RequeueAfter: networkRecheck}
}
