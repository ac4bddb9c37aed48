package migration

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// Reasons the controller fails or holds a migration with (the migration's Failed event, the
// failureReason prefix).
const (
	ReasonVMINotFound     = "VMINotFound"
	ReasonVMINotRunning   = "VMINotRunning"
	ReasonVMIDeleting     = "VMIDeleting"
	ReasonNotMigratable   = "NotMigratable"
	ReasonInFlight        = "MigrationInFlight"
	ReasonNoTarget        = "NoTargetNode"
	ReasonTargetTimeout   = "TargetUnschedulable"
	ReasonAborted         = "Aborted"
	ReasonMigrationFailed = "MigrationFailed"
	ReasonBadConfig       = "InvalidMigrationConfiguration"
	// ReasonLeftNode: an evacuation migration whose vmi no longer runs on the drained node
	// (it left meanwhile, e.g. by the previous evacuation migration): nothing to evacuate.
	ReasonLeftNode = "VMILeftNode"
)

// Final reports whether a migration phase is an end.
func Final(p vmletv1.VirtualMachineInstanceMigrationPhase) bool {
	return p == vmletv1.MigrationSucceeded || p == vmletv1.MigrationFailed
}

// Active reports whether a migration in phase p holds a slot (it is past admission and has not
// ended).
func Active(p vmletv1.VirtualMachineInstanceMigrationPhase) bool {
	switch p {
	case vmletv1.MigrationScheduling, vmletv1.MigrationScheduled, vmletv1.MigrationPreparingTarget,
		vmletv1.MigrationTargetReady, vmletv1.MigrationRunning:
		return true
	}
	return false
}

// Refusal is why a migration cannot start; zero means it can.
type Refusal struct{ Reason, Message string }

// AnnotationEvacuation marks a migration the evacuation controller created, with the drained
// node's name (KubeVirt's kubevirt.io/evacuationMigration).
const AnnotationEvacuation = "vmlet.dev/evacuationMigration"

// AdmitEvacuation refuses an evacuation migration (AnnotationEvacuation on m) whose vmi no
// longer runs on the node it was to leave.
func AdmitEvacuation(m *vmletv1.VirtualMachineInstanceMigration, vmi *vmletv1.VirtualMachineInstance) Refusal {
	from, ok := m.Annotations[AnnotationEvacuation]
	if !ok || vmi == nil || vmi.Status.NodeName == from {
		return Refusal{}
	}
	return Refusal{ReasonLeftNode, fmt.Sprintf("the vmi no longer runs on node %s, which this migration was to evacuate (it runs on %q)", from, vmi.Status.NodeName)}
}

// Admit says whether a pending migration of vmi may start. others are the vmi's other
// migrations that hold a slot. Pure.
func Admit(vmi *vmletv1.VirtualMachineInstance, others []string) Refusal {
	switch {
	case vmi == nil:
		return Refusal{ReasonVMINotFound, "the vmi does not exist"}
	case !vmi.DeletionTimestamp.IsZero():
		return Refusal{ReasonVMIDeleting, "the vmi is being deleted"}
	case vmi.Status.Phase != vmletv1.Running:
		return Refusal{ReasonVMINotRunning, fmt.Sprintf("the vmi is %s, not Running: only a running vmi migrates", phaseName(vmi.Status.Phase))}
	}
	if len(others) > 0 {
		return Refusal{ReasonInFlight, fmt.Sprintf("in-flight migration %s of this vmi: one migration per vmi at a time", others[0])}
	}
	if ms := vmi.Status.MigrationState; ms != nil && ms.MigrationUID != "" && !ms.Completed && !ms.Failed {
		return Refusal{ReasonInFlight, fmt.Sprintf("the vmi is being migrated by %s", ms.MigrationUID)}
	}
	c := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceIsMigratable)
	if c == nil {
		// The agent has not said yet: judge from the spec as it would.
		if v := Migratable(vmi); !v.OK {
			return Refusal{ReasonNotMigratable, fmt.Sprintf("%s: %s", v.Reason, v.Message)}
		}
	} else if c.Status != metav1.ConditionTrue {
		return Refusal{ReasonNotMigratable, fmt.Sprintf("%s: %s", c.Reason, c.Message)}
	}
	return Refusal{}
}

func phaseName(p vmletv1.VirtualMachineInstancePhase) string {
	if p == "" {
		return "not scheduled"
	}
	return string(p)
}

// Slots says whether one more migration from sourceNode fits: running counts the active
// migrations in the cluster, fromNode those leaving sourceNode. Pure.
func Slots(cfg vmletv1.MigrationConfiguration, running, fromNode int) (bool, string) {
	cfg = Resolve(cfg)
	if running >= int(*cfg.ParallelMigrationsPerCluster) {
		return false, fmt.Sprintf("%d migrations run in the cluster (parallelMigrationsPerCluster %d)", running, *cfg.ParallelMigrationsPerCluster)
	}
	if fromNode >= int(*cfg.ParallelOutboundMigrationsPerNode) {
		return false, fmt.Sprintf("%d migrations leave the source node (parallelOutboundMigrationsPerNode %d)", fromNode, *cfg.ParallelOutboundMigrationsPerNode)
	}
	return true, ""
}

// Progress is the phase an admitted, scheduled migration is in, read from the vmi's
// migrationState (nil or another migration's: the migration lost its vmi state, Failed).
// Pure.
func Progress(ms *vmletv1.VirtualMachineInstanceMigrationState, vmiNode string) vmletv1.VirtualMachineInstanceMigrationPhase {
	switch {
	case ms == nil:
		return vmletv1.MigrationFailed
	case ms.Failed:
		return vmletv1.MigrationFailed
	case ms.Completed && ms.TargetNodeDomainReadyTimestamp != nil && vmiNode == ms.TargetNode:
		return vmletv1.MigrationSucceeded
	case ms.StartTimestamp != nil:
		return vmletv1.MigrationRunning
	case ms.TargetNodeAddress != "":
		return vmletv1.MigrationTargetReady
	case ms.TargetNodeDomainDetected:
		return vmletv1.MigrationPreparingTarget
	}
	return vmletv1.MigrationScheduled
}

// phaseOrder ranks phases: a migration's phase never goes back.
var phaseOrder = map[vmletv1.VirtualMachineInstanceMigrationPhase]int{
	vmletv1.MigrationPhaseUnset: 0, vmletv1.MigrationPending: 1, vmletv1.MigrationScheduling: 2,
	vmletv1.MigrationScheduled: 3, vmletv1.MigrationPreparingTarget: 4, vmletv1.MigrationTargetReady: 5,
	vmletv1.MigrationRunning: 6, vmletv1.MigrationSucceeded: 7, vmletv1.MigrationFailed: 7,
}

// Advance returns the phases from cur to next in order (the ones skipped included, so that each
// gets its transition timestamp, as KubeVirt records them), or nothing when next is not ahead.
func Advance(cur, next vmletv1.VirtualMachineInstanceMigrationPhase) []vmletv1.VirtualMachineInstanceMigrationPhase {
	if Final(cur) || phaseOrder[next] <= phaseOrder[cur] {
		return nil
	}
	if Final(next) {
		return []vmletv1.VirtualMachineInstanceMigrationPhase{next}
	}
	var out []vmletv1.VirtualMachineInstanceMigrationPhase
	for _, p := range []vmletv1.VirtualMachineInstanceMigrationPhase{vmletv1.MigrationPending, vmletv1.MigrationScheduling,
		vmletv1.MigrationScheduled, vmletv1.MigrationPreparingTarget, vmletv1.MigrationTargetReady, vmletv1.MigrationRunning} {
		if phaseOrder[p] > phaseOrder[cur] && phaseOrder[p] <= phaseOrder[next] {
			out = append(out, p)
		}
	}
	return out
}
