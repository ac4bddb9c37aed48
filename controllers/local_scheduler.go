package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/vmistatus"
)

// LocalScheduler is local mode's cluster controller: with one node and no kubelet there are no
// launcher pods, so it places every new VMI on the local node (when the node matches the VMI's
// nodeSelector) by setting status.nodeName.
type LocalScheduler struct {
	Client     client.Client
	Recorder   events.EventRecorder
	NodeName   string
	NodeLabels map[string]string
}

// SetupWithManager registers the scheduler.
func (s *LocalScheduler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("vmi-local-scheduler").For(&vmletv1.VirtualMachineInstance{}).Complete(s)
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
	before := vmi.Status.DeepCopy()
	vmistatus.SetPhase(vmi, vmletv1.Pending)
	if sel := labels.SelectorFromSet(vmi.Spec.NodeSelector); !sel.Matches(labels.Set(s.NodeLabels)) {
		vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, vmistatus.ReasonUnschedulable,
			fmt.Sprintf("node %s does not match nodeSelector %s", s.NodeName, sel))
	} else {
		vmi.Status.NodeName = s.NodeName
		vmistatus.SetPhase(vmi, vmletv1.Scheduled)
		s.Recorder.Eventf(vmi, nil, "Normal", string(vmistatus.ReasonScheduled), "Schedule", "assigned to node %s", s.NodeName)
	}
	if equality.Semantic.DeepEqual(before, &vmi.Status) {
		return ctrl.Result{}, nil
	}
	if err := s.Client.Status().Update(ctx, vmi); err != nil {
		return ctrl.Result{}, fmt.Errorf("update status: %w", err)
	}
	return ctrl.Result{}, nil
}
