package migration

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	migrationsv1 "github.com/vmlet/vmlet/api/migrations/v1alpha1"
	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

func policy(name string, vmi, ns map[string]string) migrationsv1.MigrationPolicy {
	p := migrationsv1.MigrationPolicy{Spec: migrationsv1.MigrationPolicySpec{
		Selectors: &migrationsv1.Selectors{VirtualMachineInstanceSelector: vmi, NamespaceSelector: ns},
	}}
	p.Name = name
	return p
}

type labels = map[string]string

func TestMatchPolicy(t *testing.T) {
	vmi := labels{"app": "db", "tier": "gold", "team": "a"}
	ns := labels{"env": "prod", "zone": "z1"}
	noSelectors := policy("no-selectors", nil, nil)
	noSelectors.Spec.Selectors = nil
	for _, tc := range []struct {
		name     string
		policies []migrationsv1.MigrationPolicy
		vmi, ns  labels
		want     string // "" = none
	}{
		{"no policies", nil, vmi, ns, ""},
		{"vmi label matches", []migrationsv1.MigrationPolicy{policy("p", labels{"app": "db"}, nil)}, vmi, ns, "p"},
		{"namespace label matches", []migrationsv1.MigrationPolicy{policy("p", nil, labels{"env": "prod"})}, vmi, ns, "p"},
		{"both must match", []migrationsv1.MigrationPolicy{policy("p", labels{"app": "db"}, labels{"env": "dev"})}, vmi, ns, ""},
		{"every vmi label must match", []migrationsv1.MigrationPolicy{policy("p", labels{"app": "db", "tier": "silver"}, nil)}, vmi, ns, ""},
		{"a missing label does not match", []migrationsv1.MigrationPolicy{policy("p", labels{"owner": "x"}, nil)}, vmi, ns, ""},
		{"a vmi label is not looked up in the namespace", []migrationsv1.MigrationPolicy{policy("p", labels{"env": "prod"}, nil)}, vmi, ns, ""},
		{"a vmi without labels matches no vmi selector (KubeVirt would)", []migrationsv1.MigrationPolicy{policy("p", labels{"app": "db"}, nil)}, nil, ns, ""},
		{"a namespace without labels matches no namespace selector", []migrationsv1.MigrationPolicy{policy("p", nil, labels{"env": "prod"})}, vmi, nil, ""},
		{"empty selectors match everything", []migrationsv1.MigrationPolicy{policy("p", nil, nil)}, nil, nil, "p"},
		{"no selectors match nothing", []migrationsv1.MigrationPolicy{noSelectors}, vmi, ns, ""},
		{"more matching labels win", []migrationsv1.MigrationPolicy{
			policy("a-one", labels{"app": "db"}, nil),
			policy("z-two", labels{"app": "db", "tier": "gold"}, nil),
		}, vmi, ns, "z-two"},
		{"more matching labels win across selectors", []migrationsv1.MigrationPolicy{
			policy("a-vmi", labels{"app": "db"}, nil),
			policy("z-both", labels{"app": "db"}, labels{"env": "prod"}),
		}, vmi, ns, "z-both"},
		{"on equal counts vmi labels win over namespace labels", []migrationsv1.MigrationPolicy{
			policy("a-ns", nil, labels{"env": "prod", "zone": "z1"}),
			policy("m-mixed", labels{"app": "db"}, labels{"env": "prod"}),
			policy("z-vmi", labels{"app": "db", "tier": "gold"}, nil),
		}, vmi, ns, "z-vmi"},
		{"then the first name", []migrationsv1.MigrationPolicy{
			policy("b", labels{"app": "db"}, nil),
			policy("a", labels{"tier": "gold"}, nil),
			policy("c", labels{"team": "a"}, nil),
		}, vmi, ns, "a"},
		{"a non-matching policy with more labels loses to a matching one", []migrationsv1.MigrationPolicy{
			policy("a-big", labels{"app": "db", "tier": "gold", "team": "b"}, nil),
			policy("z-small", labels{"app": "db"}, nil),
		}, vmi, ns, "z-small"},
		{"a specific policy beats a catch-all", []migrationsv1.MigrationPolicy{
			policy("a-all", nil, nil),
			policy("z-db", labels{"app": "db"}, nil),
		}, vmi, ns, "z-db"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if p := MatchPolicy(tc.policies, tc.vmi, tc.ns); p != nil {
				got = p.Name
			}
			if got != tc.want {
				t.Errorf("MatchPolicy = %q, want %q", got, tc.want)
			}
			// The order of the list does not matter.
			rev := make([]migrationsv1.MigrationPolicy, 0, len(tc.policies))
			for i := len(tc.policies) - 1; i >= 0; i-- {
				rev = append(rev, tc.policies[i])
			}
			got = ""
			if p := MatchPolicy(rev, tc.vmi, tc.ns); p != nil {
				got = p.Name
			}
			if got != tc.want {
				t.Errorf("MatchPolicy (reversed list) = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestApplyPolicy(t *testing.T) {
	cluster := Resolve(vmletv1.MigrationConfiguration{
		BandwidthPerMigration:   ptr.To(resource.MustParse("64Mi")),
		CompletionTimeoutPerGiB: ptr.To[int64](800),
		AllowWorkloadDisruption: ptr.To(true),
	})
	with := func(mut func(*vmletv1.MigrationConfiguration)) vmletv1.MigrationConfiguration {
		c := *cluster.DeepCopy()
		mut(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		spec migrationsv1.MigrationPolicySpec
		want vmletv1.MigrationConfiguration
	}{
		{"nothing set keeps the cluster's values", migrationsv1.MigrationPolicySpec{}, cluster},
		{"set fields override", migrationsv1.MigrationPolicySpec{
			BandwidthPerMigration:   ptr.To(resource.MustParse("1Mi")),
			CompletionTimeoutPerGiB: ptr.To[int64](5),
			AllowAutoConverge:       ptr.To(true),
		}, with(func(c *vmletv1.MigrationConfiguration) {
			c.BandwidthPerMigration = ptr.To(resource.MustParse("1Mi"))
			c.CompletionTimeoutPerGiB = ptr.To[int64](5)
			c.AllowAutoConverge = ptr.To(true)
		})},
		{"false overrides true", migrationsv1.MigrationPolicySpec{AllowWorkloadDisruption: ptr.To(false)},
			with(func(c *vmletv1.MigrationConfiguration) { c.AllowWorkloadDisruption = ptr.To(false) })},
		{"allowWorkloadDisruption follows allowPostCopy when unset", migrationsv1.MigrationPolicySpec{AllowPostCopy: ptr.To(false)},
			with(func(c *vmletv1.MigrationConfiguration) {
				c.AllowPostCopy = ptr.To(false)
				c.AllowWorkloadDisruption = ptr.To(false)
			})},
		{"allowPostCopy on turns disruption on too", migrationsv1.MigrationPolicySpec{AllowPostCopy: ptr.To(true)},
			with(func(c *vmletv1.MigrationConfiguration) {
				c.AllowPostCopy = ptr.To(true)
				c.AllowWorkloadDisruption = ptr.To(true)
			})},
		{"an explicit allowWorkloadDisruption wins", migrationsv1.MigrationPolicySpec{AllowPostCopy: ptr.To(true), AllowWorkloadDisruption: ptr.To(false)},
			with(func(c *vmletv1.MigrationConfiguration) {
				c.AllowPostCopy = ptr.To(true)
				c.AllowWorkloadDisruption = ptr.To(false)
			})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := *cluster.DeepCopy()
			got := ApplyPolicy(cluster, &tc.spec)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("ApplyPolicy (-want +got):\n%s", d)
			}
			if d := cmp.Diff(before, cluster); d != "" {
				t.Errorf("ApplyPolicy modified its input:\n%s", d)
			}
		})
	}
}
