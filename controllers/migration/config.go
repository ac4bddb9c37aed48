package migration

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// Where the cluster's migration configuration lives: ConfigMap ConfigName in ConfigNamespace,
// key ConfigKey, a YAML or JSON document with KubeVirt's field names
// (spec.configuration.migrations of the KubeVirt CR). A ConfigMap rather than a CR of vmlet's
// own: kubectl edits it, it needs no further CRD, and a KubeVirt user's migrations block pastes in
// unchanged.
const (
	ConfigNamespace = "vmlet-system"
	ConfigName      = "vmlet-config"
	ConfigKey       = "migrations"
)

// KubeVirt's defaults.
const (
	DefaultParallelMigrationsPerCluster      = 5
	DefaultParallelOutboundMigrationsPerNode = 2
	DefaultCompletionTimeoutPerGiB           = 150 // seconds
	DefaultProgressTimeout                   = 150 // seconds
)

// ParseConfig reads the ConfigMap's document; an empty one is the defaults. Unknown fields are
// an error (a misspelt option must not silently be its default).
func ParseConfig(doc string) (vmletv1.MigrationConfiguration, error) {
	var c vmletv1.MigrationConfiguration
	if doc != "" {
		if err := yaml.UnmarshalStrict([]byte(doc), &c); err != nil {
			return c, fmt.Errorf("migration configuration (ConfigMap %s/%s, key %s): %w", ConfigNamespace, ConfigName, ConfigKey, err)
		}
	}
	if err := validate(c); err != nil {
		return c, fmt.Errorf("migration configuration (ConfigMap %s/%s, key %s): %w", ConfigNamespace, ConfigName, ConfigKey, err)
	}
	return Resolve(c), nil
}

func validate(c vmletv1.MigrationConfiguration) error {
	if c.BandwidthPerMigration != nil && c.BandwidthPerMigration.Sign() < 0 {
		return fmt.Errorf("bandwidthPerMigration %s is negative", c.BandwidthPerMigration)
	}
	if c.CompletionTimeoutPerGiB != nil && *c.CompletionTimeoutPerGiB <= 0 {
		return fmt.Errorf("completionTimeoutPerGiB %d must be positive", *c.CompletionTimeoutPerGiB)
	}
	if c.ProgressTimeout != nil && *c.ProgressTimeout <= 0 {
		return fmt.Errorf("progressTimeout %d must be positive", *c.ProgressTimeout)
	}
	if c.ParallelMigrationsPerCluster != nil && *c.ParallelMigrationsPerCluster == 0 {
		return fmt.Errorf("parallelMigrationsPerCluster must be at least 1")
	}
	if c.ParallelOutboundMigrationsPerNode != nil && *c.ParallelOutboundMigrationsPerNode == 0 {
		return fmt.Errorf("parallelOutboundMigrationsPerNode must be at least 1")
	}
	if c.Network != nil && *c.Network != "" {
		return fmt.Errorf("network %q: dedicated migration networks are not supported (the node addresses are used)", *c.Network)
	}
	return nil
}

// Resolve fills every unset field with KubeVirt's default: what is recorded in migrationState.
func Resolve(c vmletv1.MigrationConfiguration) vmletv1.MigrationConfiguration {
	c = *c.DeepCopy()
	if c.ParallelMigrationsPerCluster == nil {
		c.ParallelMigrationsPerCluster = ptr.To[uint32](DefaultParallelMigrationsPerCluster)
	}
	if c.ParallelOutboundMigrationsPerNode == nil {
		c.ParallelOutboundMigrationsPerNode = ptr.To[uint32](DefaultParallelOutboundMigrationsPerNode)
	}
	if c.BandwidthPerMigration == nil {
		q := resource.MustParse("0")
		c.BandwidthPerMigration = &q
	}
	if c.CompletionTimeoutPerGiB == nil {
		c.CompletionTimeoutPerGiB = ptr.To[int64](DefaultCompletionTimeoutPerGiB)
	}
	if c.ProgressTimeout == nil {
		c.ProgressTimeout = ptr.To[int64](DefaultProgressTimeout)
	}
	for _, b := range []**bool{&c.UnsafeMigrationOverride, &c.AllowAutoConverge, &c.AllowPostCopy, &c.AllowWorkloadDisruption, &c.DisableTLS} {
		if *b == nil {
			*b = ptr.To(false)
		}
	}
	if c.MatchSELinuxLevelOnMigration == nil {
		c.MatchSELinuxLevelOnMigration = ptr.To(true) // KubeVirt: unset matches
	}
	return c
}
