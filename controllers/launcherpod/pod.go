package launcherpod

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// Options are the cluster-wide settings of launcher pods (the `vmlet controller` flags).
type Options struct {
	// Image is the launcher image; empty means DefaultImage.
	Image string
	// LauncherRoot is the node folder of launcher run folders; empty means DefaultLauncherRoot.
	LauncherRoot string
	// VolumeRoot is the node folder of VMI storage folders; empty means DefaultVolumeRoot.
	VolumeRoot string
	// ImageCache is the node's image cache, mounted read-only at the same path (containerDisk
	// overlays have their backing files there); empty mounts none.
	ImageCache string
	// AllowEmulation lets VMIs run under TCG where KVM is not usable (KubeVirt's
	// useEmulation): without it launcher pods select nodes labelled NodeLabelKVM=true.
	AllowEmulation bool
	// TCGCacheMiB is the nodes' TCG translation cache per VM (the agent's --tcg-cache-mib,
	// DefaultTCGCacheMiB unless set), budgeted in the pod's memory when AllowEmulation is set.
	// 0 means QEMU's own default there, budgeted as QEMUDefaultTCGCacheMiB.
	TCGCacheMiB int
	// Args is the launcher's command line for its run folder, domain name and grace period
	// (controllers.DefaultLauncherArgs). Required.
	Args func(runDir, name string, grace time.Duration) []string
	// DomainName is the domain name the node agent syncs for a VMI (translate.DomainName):
	// the launcher's --name, which refuses a Sync under any other name. Required.
	DomainName func(*vmletv1.VirtualMachineInstance) string
	// RunAsUser and RunAsGroup are the launcher's (and QEMU's) uid and gid; nil means
	// DefaultRunAsUser/DefaultRunAsGroup (KubeVirt's qemu user, 107). They must match the node
	// agents' --launcher-uid/--launcher-gid, who hand each VMI's files to that user. 0 runs the
	// launcher as root (still without capabilities).
	RunAsUser, RunAsGroup *int64
	// SELinuxType is the launcher's SELinux process type (the pod's seLinuxOptions.type; the
	// cluster's ConfigKeySELinuxLauncherType); empty leaves it to the container runtime
	// (container_t). KubeVirt's choice is virt_launcher.process, which needs its policy module
	// on the nodes.
	SELinuxType string
	// SELinuxLevel is the pod's seLinuxOptions.level: a migration target's, from
	// TargetSELinuxLevel; empty lets the container runtime pick a level of its own.
	SELinuxLevel string
}

// ErrOptions is returned by Build when Options.Args or Options.DomainName is nil.
var ErrOptions = errors.New("launcherpod: Options.Args and Options.DomainName are required")

func (o Options) withDefaults() Options {
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.LauncherRoot == "" {
		o.LauncherRoot = DefaultLauncherRoot
	}
	if o.VolumeRoot == "" {
		o.VolumeRoot = DefaultVolumeRoot
	}
	if o.RunAsUser == nil {
		o.RunAsUser = ptr.To(int64(DefaultRunAsUser))
	}
	if o.RunAsGroup == nil {
		o.RunAsGroup = ptr.To(int64(DefaultRunAsGroup))
	}
	return o
}

// GracePeriod is the VMI's termination grace period: terminationGracePeriodSeconds (clamped to
// 0..MaxGracePeriod), DefaultGracePeriod when unset.
func GracePeriod(vmi *vmletv1.VirtualMachineInstance) time.Duration {
	g := vmi.Spec.TerminationGracePeriodSeconds
	switch {
	case g == nil:
		return DefaultGracePeriod
	case *g <= 0:
		return 0
	case *g >= int64(MaxGracePeriod/time.Second):
		return MaxGracePeriod
	}
	return time.Duration(*g) * time.Second
}

// NodeSelector is the VMI's nodeSelector plus NodeLabelSchedulable=true (nodes whose vmlet
// agent beats) and, unless emulation is allowed, NodeLabelKVM=true.
func NodeSelector(vmi *vmletv1.VirtualMachineInstance, allowEmulation bool) map[string]string {
	sel := maps.Clone(vmi.Spec.NodeSelector)
	if sel == nil {
		sel = map[string]string{}
	}
	sel[NodeLabelSchedulable] = "true"
	if !allowEmulation {
		sel[NodeLabelKVM] = "true"
	}
	return sel
}

// Build returns the launcher pod of vmi (to be created; the API server generates its name),
// mounting claims (ResolveClaim's, in ClaimUses order) and recording them in AnnotClaims.
func Build(vmi *vmletv1.VirtualMachineInstance, o Options, claims []Claim) (*corev1.Pod, error) {
	if o.Args == nil || o.DomainName == nil {
		return nil, ErrOptions
	}
	o = o.withDefaults()
	tcg := 0
	if o.AllowEmulation {
		tcg = o.TCGCacheMiB
		if tcg <= 0 {
			tcg = QEMUDefaultTCGCacheMiB
		}
	}
	res, err := Resources(vmi, tcg)
	if err != nil {
		return nil, err
	}
	grace := GracePeriod(vmi)
	volDir := HostVolumeDir(o.VolumeRoot, vmi.UID)
	runDir := HostRunDir(o.LauncherRoot, vmi.UID)
	// The node agent makes both folders, owned by the launcher's user (the kubelet would make
	// them root's): the pod waits for them (FailedMount, retried) until the agent has.
	volumes := []corev1.Volume{
		hostPath(RunVolume, runDir, corev1.HostPathDirectory),
		hostPath(StorageVolume, volDir, corev1.HostPathDirectory),
	}
	mounts := []corev1.VolumeMount{
		{Name: RunVolume, MountPath: runDir},
		{Name: StorageVolume, MountPath: volDir},
	}
	if o.ImageCache != "" {
		volumes = append(volumes, hostPath(ImageCacheVolume, o.ImageCache, corev1.HostPathDirectoryOrCreate))
		mounts = append(mounts, corev1.VolumeMount{Name: ImageCacheVolume, MountPath: o.ImageCache, ReadOnly: true})
	}
	annots := map[string]string{AnnotVMIName: vmi.Name}
	var devs []corev1.VolumeDevice
	if len(claims) > 0 {
		cv, cm, cd := claimVolumes(claims)
		volumes, mounts, devs = append(volumes, cv...), append(mounts, cm...), cd
		b, err := json.Marshal(claims)
		if err != nil {
			return nil, fmt.Errorf("launcher pod claims: %w", err)
		}
		annots[AnnotClaims] = string(b)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: GenerateName(vmi.Name),
			Namespace:    vmi.Namespace,
			Labels:       Labels(vmi.Name, vmi.UID),
			Annotations:  annots,
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
			NodeSelector:                  NodeSelector(vmi, o.AllowEmulation),
			Tolerations:                   slices.Clone(vmi.Spec.Tolerations),
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To(int64((grace + GraceMargin) / time.Second)),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			SecurityContext:               podSecurity(o),
			Volumes:                       volumes,
			Containers: []corev1.Container{{
				Name:                     ContainerName,
				Image:                    o.Image,
				ImagePullPolicy:          corev1.PullIfNotPresent,
				Command:                  []string{Binary},
				Args:                     o.Args(runDir, o.DomainName(vmi), grace),
				Resources:                res,
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

// podSecurity runs the launcher as o's user with no supplementary groups (KubeVirt's non-root
// virt-launcher: runAsUser/runAsGroup 107, runAsNonRoot).
func podSecurity(o Options) *corev1.PodSecurityContext {
	sc := &corev1.PodSecurityContext{
		RunAsUser:    o.RunAsUser,
		RunAsGroup:   o.RunAsGroup,
		RunAsNonRoot: ptr.To(*o.RunAsUser != 0),
	}
	if o.SELinuxType != "" || o.SELinuxLevel != "" {
		sc.SELinuxOptions = &corev1.SELinuxOptions{Type: o.SELinuxType, Level: o.SELinuxLevel}
	}
	return sc
}

func hostPath(name, path string, t corev1.HostPathType) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: path, Type: ptr.To(t)},
	}}
}
