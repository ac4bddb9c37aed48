package launcherpod

import (
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// Attachment pods (KubeVirt's hotplug attachment pods, hp-volume-*): a launcher pod's mounts
// are fixed when it is made, so a claim hot-plugged into a running VMI is mounted by a pod of
// its own on the VMI's node. The pod only holds the claim (the kubelet attaches and mounts the
// volume, and the claim counts as in use); its container runs the launcher binary with --hold,
// which waits for SIGTERM. The node agent reads the resolved claim from the pod's AnnotClaims
// once the pod runs, prepares the claim's disk on the node as for a launcher pod's claims, and
// opens it itself: the files go to the launcher over its hand-over socket (the launcher's
// container never sees the path), as the agent hands over taps.
const (
	// AttachmentAppName is LabelAppName's value on attachment pods: they are not launcher pods
	// (nothing reads a VMI's state from them), but both caches hold them (PodSelector).
	AttachmentAppName = "vmlet-hotplug"
	// LabelAttachmentFor carries the VMI's UID on its attachment pods.
	LabelAttachmentFor = "vmlet.dev/attachment-for"
	// AnnotVolume names the VMI volume an attachment pod mounts the claim of.
	AnnotVolume = "vmlet.dev/volume"
	// AttachmentContainer is the attachment pod's only container.
	AttachmentContainer = "hotplug"
	// HoldFlag makes the launcher binary wait for SIGTERM and exit 0, doing nothing else.
	HoldFlag = "--hold"
)

// attachmentMemory is the attachment container's memory request and limit: the launcher binary
// waiting for a signal (≈5 MiB RSS) with room to spare.
var attachmentMemory = resource.MustParse("32Mi")

// attachmentCPU is its CPU request: it uses none after its start.
var attachmentCPU = resource.MustParse("10m")

// PodSelector selects launcher pods and attachment pods (the caches' label selector).
func PodSelector() labels.Selector {
	r, err := labels.NewRequirement(LabelAppName, selection.In, []string{AppName, AttachmentAppName})
	if err != nil {
		panic(err) // constant input
	}
	return labels.NewSelector().Add(*r)
}

// MatchingAttachments selects the attachment pods of the VMI with this UID (client.List option).
func MatchingAttachments(uid types.UID) map[string]string {
	return map[string]string{LabelAttachmentFor: string(uid), LabelAppName: AttachmentAppName}
}

// HotplugClaimUses lists the claims of the VMI's hotpluggable volumes, one per volume, in
// volume order (a claim used by two hotpluggable volumes is listed twice: each volume has its
// attachment pod).
func HotplugClaimUses(vmi *vmletv1.VirtualMachineInstance) []VolumeClaimUse {
	var out []VolumeClaimUse
	for i := range vmi.Spec.Volumes {
		v := &vmi.Spec.Volumes[i]
		if !v.Hotpluggable() {
			continue
		}
		switch {
		case v.PersistentVolumeClaim != nil:
			out = append(out, VolumeClaimUse{Volume: v.Name, ClaimUse: ClaimUse{Name: v.PersistentVolumeClaim.ClaimName, ReadOnly: v.PersistentVolumeClaim.ReadOnly}})
		case v.DataVolume != nil:
			out = append(out, VolumeClaimUse{Volume: v.Name, ClaimUse: ClaimUse{Name: v.DataVolume.Name}})
		}
	}
	return out
}

// VolumeClaimUse is a hotpluggable volume's claim.
type VolumeClaimUse struct {
	Volume string
	ClaimUse
}

// AttachmentVolume is the volume an attachment pod was made for ("" when it is none).
func AttachmentVolume(pod *corev1.Pod) string {
	if pod.Labels[LabelAppName] != AttachmentAppName {
		return ""
	}
	return pod.Annotations[AnnotVolume]
}

// BuildAttachment returns the attachment pod of the VMI's hotpluggable volume on node, mounting
// claim (ResolveClaim's) the way the launcher pod mounts its claims (claimVolumes) and recording
// it in AnnotClaims. The pod is pinned to node by affinity, so the kube-scheduler says why it
// cannot run there (a local volume of another node, say). Pure.
func BuildAttachment(vmi *vmletv1.VirtualMachineInstance, volume, node string, claim Claim, o Options) (*corev1.Pod, error) {
	o = o.withDefaults()
	b, err := json.Marshal([]Claim{claim})
	if err != nil {
		return nil, fmt.Errorf("attachment pod claims: %w", err)
	}
	vols, mounts, devs := claimVolumes([]Claim{claim})
	l := map[string]string{LabelAttachmentFor: string(vmi.UID), LabelAppName: AttachmentAppName}
	res := corev1.ResourceList{corev1.ResourceCPU: attachmentCPU, corev1.ResourceMemory: attachmentMemory}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "hp-volume-",
			Namespace:    vmi.Namespace,
			Labels:       l,
			Annotations:  map[string]string{AnnotVMIName: vmi.Name, AnnotVolume: volume, AnnotClaims: string(b)},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         vmletv1.GroupVersion.String(),
				Kind:               "VirtualMachineInstance",
				Name:               vmi.Name,
				UID:                vmi.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
				}}},
			}},
			Tolerations:                   slices.Clone(vmi.Spec.Tolerations),
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To(int64(5)),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			SecurityContext:               podSecurity(o),
			Volumes:                       vols,
			Containers: []corev1.Container{{
				Name:                     AttachmentContainer,
				Image:                    o.Image,
				ImagePullPolicy:          corev1.PullIfNotPresent,
				Command:                  []string{Binary, HoldFlag},
				Resources:                corev1.ResourceRequirements{Requests: res, Limits: res},
				VolumeMounts:             mounts,
				VolumeDevices:            devs,
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				SecurityContext: &corev1.SecurityContext{
					Privileged:               ptr.To(false),
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}, nil
}

// AttachmentReady reports whether an attachment pod holds its claim on its node: scheduled,
// running, not being deleted.
func AttachmentReady(pod *corev1.Pod) bool {
	return pod.Spec.NodeName != "" && pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp.IsZero()
}
