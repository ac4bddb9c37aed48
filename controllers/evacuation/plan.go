package evacuation

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/controllers/vmistatus"
)

// TaintKey is the drain taint (KubeVirt's nodeDrainTaintKey, kubevirt.io/drain there), with
// effect NoSchedule.
const TaintKey = "vmlet.dev/drain"

// Metadata of the migrations this controller creates (KubeVirt's, in vmlet's group).
const (
	// GenerateName prefixes their names (KubeVirt: kubevirt-evacuation-).
	GenerateName = "vmlet-evacuation-"
	// AnnotationEvacuation holds the drained node's name (kubevirt.io/evacuationMigration).
	AnnotationEvacuation = migration.AnnotationEvacuation
	// LabelVMIName is the VMI's name (kubevirt.io/vmi-name, KubeVirt's MigrationSelectorLabel).
	LabelVMIName = "vmlet.dev/vmi-name"
)

// Back-off between evacuation migrations of a VMI whose last ones failed: KubeVirt's 20 s,
// doubled per consecutive failure; vmlet caps it.
const (
	BackoffInitial = 20 * time.Second
	BackoffMax     = 5 * time.Minute
)

// Reasons (conditions and Events).
const (
	ReasonBlocked      = "EvacuationBlocked"
	ReasonEvicted      = vmistatus.ReasonEvicted
	ReasonCreated      = "SuccessfulCreate" // KubeVirt's SuccessfulCreateVirtualMachineInstanceMigrationReason
	ReasonFailedCreate = "FailedCreate"
)

// Action is what the drain does to one VMI.
type Action string

// Actions.
const (
	// None: the VMI is left alone (not drained, strategy None, or ended).
	None Action = "None"
	// Migrate: create an evacuation migration now.
	Migrate Action = "Migrate"
	// Wait: it is migrating, backing off after failures, or waits for a slot.
	Wait Action = "Wait"
	// Block: LiveMigrate and not migratable; it stays and the drain cannot end.
	Block Action = "Block"
	// Shutdown: LiveMigrateIfPossible and not migratable; its agent shuts it down.
	Shutdown Action = "Shutdown"
	// External: evictionStrategy External; marked for an external controller.
	External Action = "External"
)

// Decision is the drain's verdict on one VMI.
type Decision struct {
	Namespace, Name string
	Action          Action
	// Message says why (blocked, waiting, shut down).
	Message string
	// RetryAfter is when to look again (back-off, slots); 0: when something changes.
	RetryAfter time.Duration
}

// Input is what Plan weighs.
type Input struct {
	// Node is the node; Drained whether it carries the drain taint.
	Node    string
	Drained bool
	// Cordoned is the node's spec.unschedulable (kubectl cordon, the first step of kubectl
	// drain): its Marked VMIs are evacuated too.
	Cordoned bool
	// Default is the cluster's evictionStrategy (nil: None).
	Default *vmletv1.EvictionStrategy
	// VMIs are the VMIs whose status.nodeName is Node.
	VMIs []vmletv1.VirtualMachineInstance
	// Migrations are all migrations in the cluster (for slots, in-flight and back-off).
	Migrations []vmletv1.VirtualMachineInstanceMigration
	// Config is the migration configuration (slots).
	Config vmletv1.MigrationConfiguration
	Now    time.Time
}

// Strategy is vmi's effective evictionStrategy: its own, else def, else None (KubeVirt's
// VMIEvictionStrategy; KubeVirt without a cluster setting treats nil as None). Pure.
func Strategy(vmi *vmletv1.VirtualMachineInstance, def *vmletv1.EvictionStrategy) vmletv1.EvictionStrategy {
	switch {
	case vmi.Spec.EvictionStrategy != nil:
		return *vmi.Spec.EvictionStrategy
	case def != nil:
		return *def
	}
	return vmletv1.EvictionStrategyNone
}

// Migratable is whether vmi can live-migrate and why not: its LiveMigratable condition (the
// agent's word, as KubeVirt reads it), or the spec as the agent would judge it while the
// condition is absent. Pure.
func Migratable(vmi *vmletv1.VirtualMachineInstance) (bool, string) {
	if c := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceIsMigratable); c != nil {
		return c.Status == metav1.ConditionTrue, c.Reason + ": " + c.Message
	}
	v := migration.Migratable(vmi)
	return v.OK, v.Reason + ": " + v.Message
}

// Drained reports whether taints hold the drain taint (key TaintKey, effect NoSchedule, any
// value). Pure.
func Drained(taints []corev1.Taint) bool {
	for _, t := range taints {
		if t.Key == TaintKey && t.Effect == corev1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
}

// Marked reports whether vmi must leave node although the node has no drain taint: the
// eviction webhook marked it (status.evacuationNodeName) when its launcher pod's eviction was
// asked for (kubectl drain, which cordons the node first; uncordoning it cancels). Pure.
func Marked(vmi *vmletv1.VirtualMachineInstance, node string) bool {
	return vmi.Status.EvacuationNodeName == node && vmi.Status.NodeName == node
}

// Plan decides what the drain does to each of in.VMIs (on a node without the drain taint only
// those Marked on a cordoned node), in name order. Migrations are created
// only for as many VMIs as there are free slots: every migration that has not ended takes one
// (pending ones too, so that the drain never queues more than can run), cluster-wide and from
// this node. Pure.
func Plan(in Input) []Decision {
	cfg := migration.Resolve(in.Config)
	unfinished, fromNode := 0, 0
	inFlight := map[string]string{} // namespace/vmi → migration
	onNode := map[string]bool{}
	for _, v := range in.VMIs {
		onNode[v.Namespace+"/"+v.Name] = true
	}
	for _, m := range in.Migrations {
		if migration.Final(m.Status.Phase) || !m.DeletionTimestamp.IsZero() {
			continue
		}
		unfinished++
		key := m.Namespace + "/" + m.Spec.VMIName
		inFlight[key] = m.Name
		if ms := m.Status.MigrationState; ms != nil && ms.SourceNode != "" {
			if ms.SourceNode == in.Node {
				fromNode++
			}
		} else if onNode[key] {
			fromNode++
		}
	}
	free := min(int(*cfg.ParallelMigrationsPerCluster)-unfinished, int(*cfg.ParallelOutboundMigrationsPerNode)-fromNode)

	vmis := slices.Clone(in.VMIs)
	slices.SortFunc(vmis, func(a, b vmletv1.VirtualMachineInstance) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	out := make([]Decision, 0, len(vmis))
	for i := range vmis {
		vmi := &vmis[i]
		d := Decision{Namespace: vmi.Namespace, Name: vmi.Name, Action: None}
		evacuated := in.Drained || (in.Cordoned && Marked(vmi, in.Node))
		switch s := Strategy(vmi, in.Default); {
		case !evacuated, vmistatus.IsFinal(vmi.Status.Phase), !vmi.DeletionTimestamp.IsZero():
		case s == vmletv1.EvictionStrategyExternal:
			d.Action, d.Message = External, "evictionStrategy External: left to an external controller"
		case s != vmletv1.EvictionStrategyLiveMigrate && s != vmletv1.EvictionStrategyLiveMigrateIfPossible:
		default:
			d = decideMigration(in, vmi, s, inFlight, &free)
		}
		out = append(out, d)
	}
	return out
}

// decideMigration is Plan's verdict on a vmi whose strategy wants it migrated.
func decideMigration(in Input, vmi *vmletv1.VirtualMachineInstance, s vmletv1.EvictionStrategy, inFlight map[string]string, free *int) Decision {
	d := Decision{Namespace: vmi.Namespace, Name: vmi.Name}
	if ok, why := Migratable(vmi); !ok {
		if s == vmletv1.EvictionStrategyLiveMigrate {
			d.Action, d.Message = Block, fmt.Sprintf("evictionStrategy LiveMigrate but the VMI cannot migrate (%s): it stays on node %s and blocks its drain", why, in.Node)
			return d
		}
		d.Action, d.Message = Shutdown, fmt.Sprintf("node %s is drained and the VMI cannot migrate (%s): evictionStrategy LiveMigrateIfPossible shuts it down", in.Node, why)
		return d
	}
	if m, ok := inFlight[vmi.Namespace+"/"+vmi.Name]; ok {
		d.Action, d.Message = Wait, "migrating: "+m
		return d
	}
	if ms := vmi.Status.MigrationState; ms != nil && ms.MigrationUID != "" && !ms.Completed && !ms.Failed {
		d.Action, d.Message = Wait, "migrating: "+string(ms.MigrationUID)
		return d
	}
	if vmi.Status.Phase != vmletv1.Running {
		d.Action, d.Message = Wait, fmt.Sprintf("the VMI is %s: it migrates once it runs", vmi.Status.Phase)
		return d
	}
	if wait, n := Backoff(in.Migrations, vmi, in.Now); wait > 0 {
		d.Action, d.RetryAfter = Wait, wait
		d.Message = fmt.Sprintf("%d evacuation migrations failed in a row: next try in %s", n, wait.Round(time.Second))
		return d
	}
	if *free <= 0 {
		d.Action, d.RetryAfter = Wait, 5*time.Second
		d.Message = "waiting for a migration slot (parallelMigrationsPerCluster, parallelOutboundMigrationsPerNode)"
		return d
	}
	*free--
	d.Action = Migrate
	return d
}

// Backoff is how long to wait before the next evacuation migration of vmi, and how many of its
// evacuation migrations failed in a row (newest first, up to one that succeeded): none failed
// → 0; else BackoffInitial doubled per further failure, capped at BackoffMax, counted from the
// last failure's end (KubeVirt's migration back-off). Pure.
func Backoff(all []vmletv1.VirtualMachineInstanceMigration, vmi *vmletv1.VirtualMachineInstance, now time.Time) (time.Duration, int) {
	var mine []vmletv1.VirtualMachineInstanceMigration
	for _, m := range all {
		if m.Namespace == vmi.Namespace && m.Spec.VMIName == vmi.Name && m.Annotations[AnnotationEvacuation] != "" && m.DeletionTimestamp.IsZero() {
			mine = append(mine, m)
		}
	}
	slices.SortFunc(mine, func(a, b vmletv1.VirtualMachineInstanceMigration) int {
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
	failed := 0
	for _, m := range mine {
		if m.Status.Phase != vmletv1.MigrationFailed {
			break
		}
		failed++
	}
	if failed == 0 {
		return 0, 0
	}
	wait := BackoffInitial
	for i := 1; i < failed && wait < BackoffMax; i++ {
		wait *= 2
	}
	wait = min(wait, BackoffMax)
	left := endOf(&mine[0]).Add(wait).Sub(now)
	if left <= 0 {
		return 0, failed
	}
	return left, failed
}

// endOf is when migration m ended: its state's end, its Failed phase's time, its creation.
func endOf(m *vmletv1.VirtualMachineInstanceMigration) time.Time {
	if ms := m.Status.MigrationState; ms != nil && ms.EndTimestamp != nil {
		return ms.EndTimestamp.Time
	}
	for _, t := range m.Status.PhaseTransitionTimestamps {
		if t.Phase == vmletv1.MigrationFailed {
			return t.PhaseTransitionTimestamp.Time
		}
	}
	return m.CreationTimestamp.Time
}

// NewMigration is the evacuation migration of vmi off node (KubeVirt's GenerateNewMigration).
func NewMigration(vmi *vmletv1.VirtualMachineInstance, node string) *vmletv1.VirtualMachineInstanceMigration {
	return &vmletv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: vmi.Namespace, GenerateName: GenerateName,
			Annotations: map[string]string{AnnotationEvacuation: node},
			Labels:      map[string]string{LabelVMIName: vmi.Name},
		},
		Spec: vmletv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name},
	}
}
