package cluster

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/vmistatus"
)

// maxTermMessage bounds the container's termination message quoted in the VMI's status.
const maxTermMessage = 512

// observe writes what the pod says into the VMI: failure, completion, deletion, or (before the
// node agent took over) scheduling.
func (r *Reconciler) observe(vmi *vmletv1.VirtualMachineInstance, pod *corev1.Pod) {
	switch {
	case pod.Status.Phase == corev1.PodFailed:
		r.fail(vmi, vmistatus.ReasonLauncherPodFailed, podFailure(pod))
		return
	case !pod.DeletionTimestamp.IsZero():
		r.fail(vmi, vmistatus.ReasonLauncherPodDeleted, fmt.Sprintf("the launcher pod %s is being deleted (evicted or deleted while the VMI ran)", pod.Name))
		return
	case pod.Status.Phase == corev1.PodSucceeded:
		// vmlet-launcher exits 0 when the guest powered off by itself.
		if vmistatus.Succeed(vmi) {
			r.announce(vmi, pod, corev1.EventTypeNormal, vmistatus.ReasonGuestShutdown, "Stop", fmt.Sprintf("the launcher pod %s completed: the guest powered off", pod.Name))
		}
		return
	case vmi.Status.NodeName != "":
		if pod.Spec.NodeName == vmi.Status.NodeName {
			setPodName(vmi, pod.Name) // a migration's target pod, once its agent took the VMI over
		}
		return // the node agent's from here on
	}
	setPodName(vmi, pod.Name)
	if pod.Spec.NodeName != "" {
		vmi.Status.NodeName = pod.Spec.NodeName
		vmistatus.SetPhase(vmi, vmletv1.Scheduled)
		vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, vmistatus.ReasonScheduled,
			fmt.Sprintf("launcher pod %s scheduled to node %s; waiting for its node agent", pod.Name, pod.Spec.NodeName))
		r.announce(vmi, pod, corev1.EventTypeNormal, vmistatus.ReasonScheduled, "Schedule", fmt.Sprintf("launcher pod %s scheduled to node %s", pod.Name, pod.Spec.NodeName))
		return
	}
	vmistatus.SetPhase(vmi, vmletv1.Scheduling)
	if c := podCondition(pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
		msg := fmt.Sprintf("launcher pod %s cannot be scheduled: %s", pod.Name, c.Message)
		if old := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceReady); old == nil || old.Reason != string(vmistatus.ReasonUnschedulable) || old.Message != msg {
			r.announce(vmi, pod, corev1.EventTypeWarning, vmistatus.ReasonFailedScheduling, "Schedule", msg)
		}
		vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, vmistatus.ReasonUnschedulable, msg)
		return
	}
	vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, vmistatus.ReasonScheduling,
		fmt.Sprintf("waiting for launcher pod %s to be scheduled", pod.Name))
}

// fail ends the VMI with a reason (vmistatus.Fail: Failed phase, Synchronized=False,
// Ready=False) and a Warning Event when it becomes Failed.
// A VMI whose node is unresponsive (NodeController) fails with ReasonNodeUnresponsive when its
// launcher pod ends or goes: that is why it ended, as KubeVirt says.
func (r *Reconciler) fail(vmi *vmletv1.VirtualMachineInstance, reason vmistatus.Reason, msg string) {
	if NodeUnresponsive(vmi) && (reason == vmistatus.ReasonLauncherPodDeleted || reason == vmistatus.ReasonLauncherPodFailed) {
		c := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
		reason, msg = vmistatus.ReasonNodeUnresponsive, c.Message+"; "+msg
	}
	if vmistatus.Fail(vmi, reason, msg) {
		r.announce(vmi, nil, corev1.EventTypeWarning, reason, "Fail", msg)
	}
}

// announce sends an Event about a status change of this pass once its status write succeeded
// (transitions).
func (r *Reconciler) announce(vmi *vmletv1.VirtualMachineInstance, related runtime.Object, typ string, reason vmistatus.Reason, action, msg string) {
	obj := vmi.DeepCopy()
	r.transitions.add(vmi.UID, func() { r.Recorder.Eventf(obj, related, typ, string(reason), action, "%s", msg) })
}

// podFailure says why a failed launcher pod failed: the pod's reason (Evicted, ...) and the
// launcher container's exit.
func podFailure(pod *corev1.Pod) string {
	parts := []string{"the launcher pod " + pod.Name + " failed"}
	if pod.Status.Reason != "" || pod.Status.Message != "" {
		parts = append(parts, strings.TrimSpace(pod.Status.Reason+" "+pod.Status.Message))
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != launcherpod.ContainerName {
			continue
		}
		t := cs.State.Terminated
		if t == nil {
			t = cs.LastTerminationState.Terminated
		}
		if t == nil {
			continue
		}
		s := fmt.Sprintf("the launcher exited with code %d", t.ExitCode)
		if m := vmistatus.ExitMeaning(t.ExitCode); m != "" {
			s += " (" + m + ")"
		}
		if t.Signal != 0 {
			s += fmt.Sprintf(", signal %d", t.Signal)
		}
		if t.Reason != "" {
			s += ", reason " + t.Reason
		}
		if m := strings.TrimSpace(t.Message); m != "" {
			if len(m) > maxTermMessage {
				m = "…" + m[len(m)-maxTermMessage:]
			}
			s += ": " + m
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// pick chooses the VMI's pod among pods (normally one): the one on the VMI's node, else the one
// its status names, else the oldest. The others are extra, except migration target pods that
// are not the VMI's (ownTarget): the migration controller made them and deletes them when
// their migration fails, so they are returned apart, neither the VMI's pod nor extra.
func pick(vmi *vmletv1.VirtualMachineInstance, all []corev1.Pod) (pod *corev1.Pod, extra, targets []corev1.Pod) {
	var pods []corev1.Pod
	for _, p := range all {
		if launcherpod.MigrationTarget(&p) != "" && !ownTarget(vmi, &p) {
			targets = append(targets, p)
		} else {
			pods = append(pods, p)
		}
	}
	if len(pods) == 0 {
		return nil, nil, targets
	}
	sort.SliceStable(pods, func(i, j int) bool {
		ri, rj := rank(vmi, &pods[i]), rank(vmi, &pods[j])
		if ri != rj {
			return ri < rj
		}
		if !pods[i].CreationTimestamp.Equal(&pods[j].CreationTimestamp) {
			return pods[i].CreationTimestamp.Before(&pods[j].CreationTimestamp)
		}
		return pods[i].Name < pods[j].Name
	})
	return &pods[0], pods[1:], targets
}

// ownTarget reports whether the migration target pod p is the VMI's own pod: its status names
// it (it took the VMI over earlier), or the agent of p's node took the VMI over for the
// migration p was made for (status.nodeName is migrationState.targetNode) and the status does
// not name it yet.
func ownTarget(vmi *vmletv1.VirtualMachineInstance, p *corev1.Pod) bool {
	if p.Name == podName(vmi) {
		return true
	}
	ms := vmi.Status.MigrationState
	return ms != nil && ms.MigrationUID == launcherpod.MigrationTarget(p) && ms.TargetNode != "" &&
		vmi.Status.NodeName == ms.TargetNode && p.Spec.NodeName == ms.TargetNode
}

// migratedAway reports whether the VMI's migration completed (the guest left its source) and
// its target's agent has not taken it over yet: the source's launcher exits by itself then.
func migratedAway(vmi *vmletv1.VirtualMachineInstance) bool {
	ms := vmi.Status.MigrationState
	return ms != nil && ms.Completed && !ms.Failed && ms.TargetNode != "" &&
		vmi.Status.NodeName != "" && vmi.Status.NodeName != ms.TargetNode
}

// handover says what to do with a VMI whose migration completed before its target's agent took
// it over (migratedAway) when its launcher pod (nil: gone) ended: the source launcher exits
// once it handed the guest over, so that is no failure. wait: the target pod lives, look again
// once the takeover is written. lost: the target pod is gone or ended too, and the guest with
// it (why).
func handover(vmi *vmletv1.VirtualMachineInstance, pod *corev1.Pod, targets []corev1.Pod) (wait bool, lost string) {
	if !migratedAway(vmi) || (pod != nil && !podEnded(pod)) {
		return false, ""
	}
	ms := vmi.Status.MigrationState
	for i := range targets {
		if t := &targets[i]; launcherpod.MigrationTarget(t) == ms.MigrationUID && !podEnded(t) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("migration %s handed the guest to node %s, but its target launcher pod ended or is gone before that node's agent took the VMI over",
		ms.MigrationUID, ms.TargetNode)
}

// podEnded reports whether a launcher pod ended or is being deleted.
func podEnded(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded || !p.DeletionTimestamp.IsZero()
}

func rank(vmi *vmletv1.VirtualMachineInstance, p *corev1.Pod) int {
	switch {
	case vmi.Status.NodeName != "" && p.Spec.NodeName == vmi.Status.NodeName:
		return 0
	case p.Name == podName(vmi):
		return 1
	}
	return 2
}

func podName(vmi *vmletv1.VirtualMachineInstance) string {
	if vmi.Status.Launcher == nil {
		return ""
	}
	return vmi.Status.Launcher.Pod
}

func setPodName(vmi *vmletv1.VirtualMachineInstance, name string) {
	if vmi.Status.Launcher == nil {
		vmi.Status.Launcher = &vmletv1.LauncherStatus{}
	}
	vmi.Status.Launcher.Pod = name
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}
