package cluster

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/qemu/launcher"
)

// Reasons this controller gives the VMI (status.reason and conditions).
const (
	ReasonScheduling    = "Scheduling"
	ReasonUnschedulable = "Unschedulable"
	ReasonScheduled     = "Scheduled"
	ReasonPodFailed     = "LauncherPodFailed"
	ReasonPodDeleted    = "LauncherPodDeleted"
	ReasonInvalidSpec   = "InvalidSpec"
	ReasonGuestShutdown = "GuestShutdown"
)

// maxTermMessage bounds the container's termination message quoted in the VMI's status.
const maxTermMessage = 512

// observe writes what the pod says into the VMI: failure, completion, deletion, or (before the
// node agent took over) scheduling.
func (r *Reconciler) observe(vmi *vmletv1.VirtualMachineInstance, pod *corev1.Pod) {
	switch {
	case pod.Status.Phase == corev1.PodFailed:
		r.fail(vmi, ReasonPodFailed, podFailure(pod))
		return
	case !pod.DeletionTimestamp.IsZero():
		r.fail(vmi, ReasonPodDeleted, fmt.Sprintf("the launcher pod %s is being deleted (evicted or deleted while the VMI ran)", pod.Name))
		return
	case pod.Status.Phase == corev1.PodSucceeded:
		// vmlet-launcher exits 0 when the guest powered off by itself.
		if vmi.Status.Phase != vmletv1.Succeeded {
			r.Recorder.Eventf(vmi, pod, corev1.EventTypeNormal, ReasonGuestShutdown, "Stop", "the launcher pod %s completed: the guest powered off", pod.Name)
		}
		controllers.SetPhase(vmi, vmletv1.Succeeded)
		vmi.Status.Reason = ReasonGuestShutdown
		controllers.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, ReasonGuestShutdown, "the guest powered off")
		return
	case vmi.Status.NodeName != "":
		return // the node agent's from here on
	}
	setPodName(vmi, pod.Name)
	if pod.Spec.NodeName != "" {
		vmi.Status.NodeName = pod.Spec.NodeName
		controllers.SetPhase(vmi, vmletv1.Scheduled)
		controllers.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, ReasonScheduled,
			fmt.Sprintf("launcher pod %s scheduled to node %s; waiting for its node agent", pod.Name, pod.Spec.NodeName))
		r.Recorder.Eventf(vmi, pod, corev1.EventTypeNormal, ReasonScheduled, "Schedule", "launcher pod %s scheduled to node %s", pod.Name, pod.Spec.NodeName)
		return
	}
	controllers.SetPhase(vmi, vmletv1.Scheduling)
	if c := podCondition(pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
		msg := fmt.Sprintf("launcher pod %s cannot be scheduled: %s", pod.Name, c.Message)
		if old := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceReady); old == nil || old.Reason != ReasonUnschedulable || old.Message != msg {
			r.Recorder.Eventf(vmi, pod, corev1.EventTypeWarning, "FailedScheduling", "Schedule", "%s", msg)
		}
		controllers.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, ReasonUnschedulable, msg)
		return
	}
	controllers.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, ReasonScheduling,
		fmt.Sprintf("waiting for launcher pod %s to be scheduled", pod.Name))
}

// fail ends the VMI with a reason: Failed phase, Synchronized=False, Ready=False, and a Warning
// Event on the transition.
func (r *Reconciler) fail(vmi *vmletv1.VirtualMachineInstance, reason, msg string) {
	if vmi.Status.Phase != vmletv1.Failed {
		r.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, reason, "Fail", "%s", msg)
	}
	controllers.SetPhase(vmi, vmletv1.Failed)
	if vmi.Status.Phase != vmletv1.Failed {
		return // it had already Succeeded
	}
	vmi.Status.Reason = reason
	controllers.SetCondition(vmi, vmletv1.VirtualMachineInstanceSynchronized, false, reason, msg)
	controllers.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, reason, msg)
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
		if m := exitMeaning(t.ExitCode); m != "" {
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

// exitMeaning explains vmlet-launcher's exit statuses (qemu/launcher Exit*).
func exitMeaning(code int32) string {
	switch code {
	case launcher.ExitError:
		return "the launcher failed"
	case launcher.ExitUsage:
		return "bad launcher command line"
	case launcher.ExitForced:
		return "the guest did not power off within its grace period and was stopped by force"
	case launcher.ExitQEMUDied:
		return "QEMU ended unexpectedly"
	case 137:
		return "killed, e.g. out of memory"
	}
	return ""
}

// pick chooses the VMI's pod among pods (normally one): the one on the VMI's node, else the one
// its status names, else the oldest. The others are extra.
func pick(vmi *vmletv1.VirtualMachineInstance, pods []corev1.Pod) (*corev1.Pod, []corev1.Pod) {
	if len(pods) == 0 {
		return nil, nil
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
	return &pods[0], pods[1:]
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
