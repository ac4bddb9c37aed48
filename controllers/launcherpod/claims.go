package launcherpod

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// AnnotClaims carries the VMI's resolved claims on its launcher pod (a JSON list of Claim):
// the node agent reads where each claim is from it, so that the pod, immutable once made, is
// the one record of what its container mounts.
const AnnotClaims = "vmlet.dev/claims"

// Reasons a VMI waits for its claims (condition Synchronized=False, and the Event's reason).
const (
	// ReasonPVCNotFound is KubeVirt's FailedPvcNotFound: a claim (or a dataVolume's claim)
	// does not exist yet; the VMI stays Pending until it appears.
	ReasonPVCNotFound = "FailedPvcNotFound"
	// ReasonPVCNotReady is KubeVirt's PVCNotReady: the claim is not bound (or its volume is
	// not there yet).
	ReasonPVCNotReady = "PVCNotReady"
	// ReasonPVCNotSupported is vmlet's: the claim is bound to a volume the launcher cannot
	// use (see ResolveClaim). The VMI stays Pending: a claim can be replaced.
	ReasonPVCNotSupported = "PVCNotSupported"
)

// MinClaimBytes is the smallest Filesystem claim vmlet makes a disk.img in: 2 MiB (the image
// leaves the file system its overhead and is 1 MiB aligned, so it is at least 1 MiB).
const MinClaimBytes = 2 << 20

// Claim is a claim a VMI's launcher pod mounts, resolved through its PersistentVolume.
//
// Path is where the claim is on the node AND in the launcher container: vmlet mounts a
// Filesystem claim at its volume's host folder (a local PersistentVolume's spec.local.path, a
// hostPath PersistentVolume's spec.hostPath.path) and gives a Block claim's device the local
// volume's device path, so that the disk paths the node agent computes on the host are valid
// inside the container (as for the VMI's storage folder; see the package doc).
type Claim struct {
	// ClaimName is the PersistentVolumeClaim's name (the VMI's namespace).
	ClaimName string `json:"claimName"`
	// Mode is the claim's volume mode.
	Mode corev1.PersistentVolumeMode `json:"volumeMode"`
	// Path is the volume's folder (Filesystem, holding disk.img) or device node (Block).
	Path string `json:"path"`
	// CapacityBytes is the bound claim's capacity: the size of a disk.img made in it.
	CapacityBytes int64 `json:"capacityBytes"`
	// AccessModes are the bound claim's (status.accessModes).
	AccessModes []corev1.PersistentVolumeAccessMode `json:"accessModes,omitempty"`
	// ReadOnly when every volume of the VMI on this claim is read-only (an ephemeral volume
	// only reads its claim).
	ReadOnly bool `json:"readOnly,omitempty"`
}

// ClaimProblem says why a claim cannot be mounted (yet): the VMI waits with Reason.
type ClaimProblem struct {
	Reason  string
	Message string
}

func (p *ClaimProblem) Error() string { return p.Message }

// ClaimUse is one claim a VMI's volumes use: its name and whether all of them only read it.
type ClaimUse struct {
	Name     string
	ReadOnly bool
}

// ClaimUses lists the claims the VMI's volumes attached at boot refer to (persistentVolumeClaim,
// dataVolume: the claim of the same name, ephemeral), once each, in volume order. Hotpluggable
// volumes are not in the launcher pod.
func ClaimUses(vmi *vmletv1.VirtualMachineInstance) []ClaimUse {
	var out []ClaimUse
	idx := map[string]int{}
	for i := range vmi.Spec.Volumes {
		v := &vmi.Spec.Volumes[i]
		if v.Hotpluggable() {
			continue
		}
		var name string
		var ro bool
		switch {
		case v.PersistentVolumeClaim != nil:
			name, ro = v.PersistentVolumeClaim.ClaimName, v.PersistentVolumeClaim.ReadOnly
		case v.DataVolume != nil:
			name = v.DataVolume.Name
		case v.Ephemeral != nil && v.Ephemeral.PersistentVolumeClaim != nil:
			name, ro = v.Ephemeral.PersistentVolumeClaim.ClaimName, true
		default:
			continue
		}
		if j, ok := idx[name]; ok {
			out[j].ReadOnly = out[j].ReadOnly && ro
			continue
		}
		idx[name] = len(out)
		out = append(out, ClaimUse{Name: name, ReadOnly: ro})
	}
	return out
}

// ResolveClaim resolves one claim of the VMI's namespace: pvc is nil when it does not exist,
// pv nil when its volume does not (yet). o gives the folders a claim may not be mounted over.
// Pure.
func ResolveClaim(use ClaimUse, namespace string, pvc *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume, o Options) (Claim, *ClaimProblem) {
	o = o.withDefaults()
	key := namespace + "/" + use.Name
	if pvc == nil {
		return Claim{}, &ClaimProblem{ReasonPVCNotFound, fmt.Sprintf("PVC %s does not exist, waiting for it to appear", key)}
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		phase := pvc.Status.Phase
		if phase == "" {
			phase = corev1.ClaimPending
		}
		return Claim{}, &ClaimProblem{ReasonPVCNotReady, fmt.Sprintf("PVC %s is %s, waiting for it to be bound", key, phase)}
	}
	if pv == nil {
		return Claim{}, &ClaimProblem{ReasonPVCNotReady, fmt.Sprintf("PVC %s is bound to PersistentVolume %s, which does not exist", key, pvc.Spec.VolumeName)}
	}
	c := Claim{ClaimName: use.Name, Mode: corev1.PersistentVolumeFilesystem, AccessModes: slices.Clone(pvc.Status.AccessModes), ReadOnly: use.ReadOnly}
	if m := pvc.Spec.VolumeMode; m != nil {
		c.Mode = *m
	}
	if q, ok := pvc.Status.Capacity[corev1.ResourceStorage]; ok {
		c.CapacityBytes = q.Value()
	}
	unsupported := func(format string, args ...any) (Claim, *ClaimProblem) {
		return Claim{}, &ClaimProblem{ReasonPVCNotSupported, fmt.Sprintf("PVC %s (PersistentVolume %s): ", key, pv.Name) + fmt.Sprintf(format, args...)}
	}
	switch {
	case pv.Spec.Local != nil:
		c.Path = pv.Spec.Local.Path
	case pv.Spec.HostPath != nil && c.Mode == corev1.PersistentVolumeFilesystem:
		c.Path = pv.Spec.HostPath.Path
	default:
		return unsupported("vmlet mounts local and hostPath PersistentVolumes only (Block: local only)")
	}
	if !filepath.IsAbs(c.Path) || filepath.Clean(c.Path) != c.Path {
		return unsupported("path %q is not an absolute clean path", c.Path)
	}
	switch c.Mode {
	case corev1.PersistentVolumeBlock:
		if !strings.HasPrefix(c.Path, "/dev/") {
			return unsupported("a Block volume's device %q is not beneath /dev", c.Path)
		}
	case corev1.PersistentVolumeFilesystem:
		for _, r := range reservedPaths(o) {
			if c.Path == r || strings.HasPrefix(c.Path, r+"/") || strings.HasPrefix(r, c.Path+"/") || c.Path == "/" {
				return unsupported("its folder %s overlaps %s, which the launcher pod mounts or needs", c.Path, r)
			}
		}
		if c.CapacityBytes < MinClaimBytes && !use.ReadOnly {
			return unsupported("capacity %d bytes is too small for a disk image (at least %d)", c.CapacityBytes, MinClaimBytes)
		}
	default:
		return unsupported("volume mode %q", c.Mode)
	}
	return c, nil
}

// reservedPaths are the folders a Filesystem claim may not be mounted at, over or under.
func reservedPaths(o Options) []string {
	r := []string{o.LauncherRoot, o.VolumeRoot, "/dev", "/proc", "/sys", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64"}
	if o.ImageCache != "" {
		r = append(r, o.ImageCache)
	}
	return r
}

// claimVolumes are the pod volumes, mounts and devices of claims (in order): volume
// "claim-<i>" for the i-th claim, a Filesystem claim mounted at its Path (read-only when
// only read), a Block claim's device at its Path.
func claimVolumes(claims []Claim) ([]corev1.Volume, []corev1.VolumeMount, []corev1.VolumeDevice) {
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	var devs []corev1.VolumeDevice
	for i, c := range claims {
		name := fmt.Sprintf("claim-%d", i)
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.ClaimName, ReadOnly: c.ReadOnly}}})
		if c.Mode == corev1.PersistentVolumeBlock {
			devs = append(devs, corev1.VolumeDevice{Name: name, DevicePath: c.Path})
			continue
		}
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: c.Path, ReadOnly: c.ReadOnly})
	}
	return vols, mounts, devs
}

// PodClaims reads a launcher pod's AnnotClaims (none: nil).
func PodClaims(pod *corev1.Pod) ([]Claim, error) {
	s, ok := pod.Annotations[AnnotClaims]
	if !ok {
		return nil, nil
	}
	var claims []Claim
	if err := json.Unmarshal([]byte(s), &claims); err != nil {
		return nil, fmt.Errorf("launcher pod %s/%s: annotation %s: %w", pod.Namespace, pod.Name, AnnotClaims, err)
	}
	return claims, nil
}
