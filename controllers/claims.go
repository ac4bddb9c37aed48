package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/storage"
)

// ClaimSource is a launcher runtime whose launchers mount the VMIs' claims themselves (the
// pod runtime: the launcher pod mounts them, and says where in launcherpod.AnnotClaims).
type ClaimSource interface {
	// Claims returns the claims the VMI's launcher mounts, then those its attachment pods
	// hold on this node (hot-plugged volumes); ErrClaimsUnknown while its pod is not known yet.
	Claims(ctx context.Context, id string) ([]launcherpod.Claim, error)
	// AttachmentWait says what the VMI's hot-plugged volume waits for while its claim is not
	// among Claims' ("" when it is).
	AttachmentWait(ctx context.Context, id, volume string) string
}

// ErrClaimsUnknown says a VMI's claims cannot be resolved yet (its launcher pod is not in the
// agent's cache yet): the VMI waits, it is not failed.
var ErrClaimsUnknown = errors.New("the launcher pod that mounts the claims is not known yet")

// KubeVirt's filesystem overhead (CDI's default 5.5%): a disk.img made in an empty Filesystem
// claim leaves that much of the claim's capacity to the file system, aligned down to 1 MiB.
const (
	claimOverheadPerMille = 55
	claimImageAlign       = 1 << 20
)

// ClaimImageBytes is the size of the sparse disk.img vmlet makes in an empty Filesystem claim of
// capacity bytes (KubeVirt: capacity less the filesystem overhead, 1 MiB aligned).
func ClaimImageBytes(capacity int64) int64 {
	n := capacity - capacity*claimOverheadPerMille/1000
	return n / claimImageAlign * claimImageAlign
}

// podClaims reads the claims the VMI's launcher mounts from the runtime (nil when the runtime
// mounts none, or the VMI uses none), by claim name.
func (r *VMIReconciler) podClaims(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) (map[string]launcherpod.Claim, error) {
	cs, ok := r.Runtime.(ClaimSource)
	if !ok || len(launcherpod.ClaimUses(vmi))+len(launcherpod.HotplugClaimUses(vmi)) == 0 {
		return nil, nil
	}
	list, err := cs.Claims(ctx, string(vmi.UID))
	if err != nil {
		return nil, fmt.Errorf("read the launcher pod's claims: %w", err)
	}
	out := make(map[string]launcherpod.Claim, len(list))
	for _, c := range list {
		out[c.ClaimName] = c
	}
	return out, nil
}

// withClaims returns env with the pod's claims added to the node's (keyed namespace/name, so
// that they win over a node-wide claim of the same name).
func withClaims(env translate.NodeEnv, namespace string, claims map[string]launcherpod.Claim) translate.NodeEnv {
	if len(claims) == 0 {
		return env
	}
	all := maps.Clone(env.Storage.Claims)
	if all == nil {
		all = map[string]storage.Claim{}
	}
	for name, c := range claims {
		sc := storage.Claim{Path: c.Path, Mode: storage.VolumeMode(c.Mode)}
		if c.Mode != corev1.PersistentVolumeBlock {
			sc.CapacityBytes = ClaimImageBytes(c.CapacityBytes)
		}
		all[namespace+"/"+name] = sc
	}
	env.Storage.Claims = all
	return env
}

// claimInfo is a claim volume's status.volumeStatus[].persistentVolumeClaimInfo.
func claimInfo(c launcherpod.Claim) *vmletv1.PersistentVolumeClaimInfo {
	mode := c.Mode
	info := &vmletv1.PersistentVolumeClaimInfo{ClaimName: c.ClaimName, AccessModes: c.AccessModes, VolumeMode: &mode}
	if c.CapacityBytes > 0 {
		info.Capacity = corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(c.CapacityBytes, resource.BinarySI)}
	}
	return info
}

// statusClaims are the claims volumeStatus describes: the launcher pod's (pod), and for the
// volumes that have none there, the node's claims marked shared (local mode's, which every
// node of the machine opens at the same path), described as ReadWriteMany: what they are to
// a migration. A node claim that is not shared is described nowhere (nothing says how other
// nodes reach it). Pure.
func statusClaims(vmi *vmletv1.VirtualMachineInstance, pod map[string]launcherpod.Claim, node map[string]storage.Claim) map[string]launcherpod.Claim {
	out, cloned := pod, false
	for i := range vmi.Spec.Volumes {
		name := volumeClaim(&vmi.Spec.Volumes[i])
		if name == "" {
			continue
		}
		if _, ok := out[name]; ok {
			continue
		}
		c, ok := translate.LookupClaim(node, vmi.Namespace, name)
		if !ok || !c.Shared {
			continue
		}
		if !cloned {
			out, cloned = maps.Clone(pod), true
			if out == nil {
				out = map[string]launcherpod.Claim{}
			}
		}
		mode := corev1.PersistentVolumeFilesystem
		if c.Mode == storage.Block {
			mode = corev1.PersistentVolumeBlock
		}
		out[name] = launcherpod.Claim{ClaimName: name, Mode: mode, Path: c.Path, CapacityBytes: c.CapacityBytes,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}}
	}
	return out
}

// volumeClaim is the claim a volume uses ("" for other sources).
func volumeClaim(v *vmletv1.Volume) string {
	switch {
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ClaimName
	case v.DataVolume != nil:
		return v.DataVolume.Name
	case v.Ephemeral != nil && v.Ephemeral.PersistentVolumeClaim != nil:
		return v.Ephemeral.PersistentVolumeClaim.ClaimName
	}
	return ""
}
