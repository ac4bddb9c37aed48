package evacuation

import (
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/vmistatus"
)

// EvictionVerdict is the eviction webhook's answer to the eviction of a VMI's launcher pod
// (KubeVirt's virt-launcher eviction interceptor).
type EvictionVerdict struct {
	// Allowed lets the eviction proceed (the pod is deleted, and with it the guest).
	Allowed bool
	// Mark is the node the VMI must leave (status.evacuationNodeName), "" for none: the
	// evacuation controller migrates a marked VMI as it does on a drained node.
	Mark string
	// Code and Message are the refusal's HTTP status and text: 429 (Too Many Requests) is what
	// kubectl drain retries until the pod is gone.
	Code    int32
	Message string
}

// Eviction decides the eviction of pod, vmi's launcher pod, by vmi's effective
// evictionStrategy (def: the cluster's):
//   - LiveMigrate, LiveMigrateIfPossible and migratable: refused (429), and the VMI is marked:
//     it migrates away, then its pod ends and the drain goes on;
//   - LiveMigrate and not migratable: refused (429) with the reason, the drain waits on it;
//   - External: refused (429) and marked, for the external controller;
//   - LiveMigrateIfPossible not migratable, None: allowed (the guest shuts down with its pod).
//
// A pod that is not the vmi's (a migration target: it is removed with its migration), and a
// vmi that ended or is being deleted, are no concern: allowed. Pure.
func Eviction(pod *corev1.Pod, vmi *vmletv1.VirtualMachineInstance, def *vmletv1.EvictionStrategy) EvictionVerdict {
	if vmi == nil || vmistatus.IsFinal(vmi.Status.Phase) || !vmi.DeletionTimestamp.IsZero() ||
		pod.Spec.NodeName == "" || pod.Spec.NodeName != vmi.Status.NodeName {
		return EvictionVerdict{Allowed: true}
	}
	node := pod.Spec.NodeName
	name := vmi.Namespace + "/" + vmi.Name
	refuse := func(msg string) EvictionVerdict {
		return EvictionVerdict{Code: http.StatusTooManyRequests, Message: msg}
	}
	switch s := Strategy(vmi, def); s {
	case vmletv1.EvictionStrategyExternal:
		v := refuse(fmt.Sprintf("Eviction triggered evacuation of VMI %s (evictionStrategy External: left to an external controller)", name))
		v.Mark = node
		return v
	case vmletv1.EvictionStrategyLiveMigrate, vmletv1.EvictionStrategyLiveMigrateIfPossible:
		ok, why := Migratable(vmi)
		switch {
		case ok:
			v := refuse(fmt.Sprintf("Eviction triggered evacuation of VMI %s: it migrates off node %s", name, node))
			v.Mark = node
			return v
		case s == vmletv1.EvictionStrategyLiveMigrate:
			return refuse(fmt.Sprintf("VMI %s has evictionStrategy LiveMigrate but cannot migrate (%s): it stays on node %s", name, why, node))
		}
	}
	return EvictionVerdict{Allowed: true}
}
