package migration

import (
	migrationsv1 "github.com/vmlet/vmlet/api/migrations/v1alpha1"
	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// policyScore is how well a policy matches a vmi: how many of its labels the vmi's and the
// namespace's labels matched.
type policyScore struct {
	vmiLabels, nsLabels int
}

// better says whether s ranks above o: more matching labels in all, then more vmi labels.
func (s policyScore) better(o policyScore) bool {
	if a, b := s.vmiLabels+s.nsLabels, o.vmiLabels+o.nsLabels; a != b {
		return a > b
	}
	return s.vmiLabels > o.vmiLabels
}

// scorePolicy says whether p matches a vmi with vmiLabels in a namespace with nsLabels (every
// label of both selectors present with its value), and how well. A policy without selectors
// matches nothing; empty selectors match every vmi.
//
// KubeVirt (pkg/virt-controller/watch/migration/migrationpolicy.go, countMatchingLabels) skips
// both selectors when the vmi has no labels at all, so that a vmi without labels matches every
// policy; vmlet does not: a selector label the vmi lacks never matches.
func scorePolicy(p *migrationsv1.MigrationPolicy, vmiLabels, nsLabels map[string]string) (bool, policyScore) {
	sel := p.Spec.Selectors
	if sel == nil {
		return false, policyScore{}
	}
	count := func(want, have map[string]string) (int, bool) {
		for k, v := range want {
			if got, ok := have[k]; !ok || got != v {
				return 0, false
			}
		}
		return len(want), true
	}
	vmi, ok := count(sel.VirtualMachineInstanceSelector, vmiLabels)
	if !ok {
		return false, policyScore{}
	}
	ns, ok := count(sel.NamespaceSelector, nsLabels)
	if !ok {
		return false, policyScore{}
	}
	return true, policyScore{vmiLabels: vmi, nsLabels: ns}
}

// MatchPolicy returns the policy that applies to a vmi with vmiLabels in a namespace with
// nsLabels, nil if none matches. KubeVirt's precedence: the matching policy with the most
// matching labels (vmi and namespace together) wins; on a tie the one with more matching vmi
// labels; then the first name in lexicographic order.
func MatchPolicy(policies []migrationsv1.MigrationPolicy, vmiLabels, nsLabels map[string]string) *migrationsv1.MigrationPolicy {
	var best *migrationsv1.MigrationPolicy
	var bestScore policyScore
	for i := range policies {
		p := &policies[i]
		ok, score := scorePolicy(p, vmiLabels, nsLabels)
		if !ok {
			continue
		}
		if best == nil || score.better(bestScore) || (!bestScore.better(score) && p.Name < best.Name) {
			best, bestScore = p, score
		}
	}
	return best
}

// ApplyPolicy returns cfg with the fields spec sets over it (KubeVirt's
// applyMigrationPolicySpec): bandwidthPerMigration, completionTimeoutPerGiB,
// allowAutoConverge, allowPostCopy, allowWorkloadDisruption. As in KubeVirt, a policy that
// sets allowPostCopy and not allowWorkloadDisruption sets allowWorkloadDisruption to the same
// value. cfg is not modified.
func ApplyPolicy(cfg vmletv1.MigrationConfiguration, spec *migrationsv1.MigrationPolicySpec) vmletv1.MigrationConfiguration {
	out := *cfg.DeepCopy()
	if spec.AllowWorkloadDisruption == nil && spec.AllowPostCopy != nil {
		out.AllowWorkloadDisruption = ptrCopy(spec.AllowPostCopy)
	}
	if spec.AllowAutoConverge != nil {
		out.AllowAutoConverge = ptrCopy(spec.AllowAutoConverge)
	}
	if spec.BandwidthPerMigration != nil {
		q := spec.BandwidthPerMigration.DeepCopy()
		out.BandwidthPerMigration = &q
	}
	if spec.CompletionTimeoutPerGiB != nil {
		out.CompletionTimeoutPerGiB = ptrCopy(spec.CompletionTimeoutPerGiB)
	}
	if spec.AllowPostCopy != nil {
		out.AllowPostCopy = ptrCopy(spec.AllowPostCopy)
	}
	if spec.AllowWorkloadDisruption != nil {
		out.AllowWorkloadDisruption = ptrCopy(spec.AllowWorkloadDisruption)
	}
	return out
}

func ptrCopy[T any](p *T) *T {
	v := *p
	return &v
}
