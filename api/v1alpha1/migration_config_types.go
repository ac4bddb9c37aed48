package v1alpha1

import "k8s.io/apimachinery/pkg/api/resource"

// MigrationConfiguration holds the cluster's live-migration settings, with KubeVirt's names and
// defaults (KubeVirt keeps them in the KubeVirt CR's spec.configuration.migrations; vmlet reads
// them from the vmlet-config ConfigMap, key "migrations"). The migration controller resolves
// them when it schedules a migration and records the result in migrationState, so that both
// nodes use the same values.
type MigrationConfiguration struct {
	// ParallelMigrationsPerCluster is the most migrations running at once in the cluster (5).
	// +optional
	ParallelMigrationsPerCluster *uint32 `json:"parallelMigrationsPerCluster,omitempty"`
	// ParallelOutboundMigrationsPerNode is the most migrations leaving one node at once (2).
	// +optional
	ParallelOutboundMigrationsPerNode *uint32 `json:"parallelOutboundMigrationsPerNode,omitempty"`
	// BandwidthPerMigration limits each migration's bandwidth (bytes per second); 0 means
	// unlimited (the default).
	// +optional
	BandwidthPerMigration *resource.Quantity `json:"bandwidthPerMigration,omitempty"`
	// CompletionTimeoutPerGiB is how many seconds a migration may take per GiB of guest memory
	// and copied disks before it is aborted (or switched to post-copy, or the guest paused,
	// when allowed) (150).
	// +optional
	CompletionTimeoutPerGiB *int64 `json:"completionTimeoutPerGiB,omitempty"`
	// ProgressTimeout is how many seconds a migration may make no progress before it is
	// aborted (150).
	// +optional
	ProgressTimeout *int64 `json:"progressTimeout,omitempty"`
	// UnsafeMigrationOverride allows migrations KubeVirt considers unsafe. Not used by vmlet.
	// +optional
	UnsafeMigrationOverride *bool `json:"unsafeMigrationOverride,omitempty"`
	// AllowAutoConverge lets QEMU throttle the guest's vCPUs when it dirties memory faster
	// than the link carries (false). Refused under TCG on QEMU before 9.0 (qemu.ErrUnsafe): the
	// migration fails.
	// +optional
	AllowAutoConverge *bool `json:"allowAutoConverge,omitempty"`
	// AllowPostCopy lets a migration that would time out switch to post-copy (false).
	// +optional
	AllowPostCopy *bool `json:"allowPostCopy,omitempty"`
	// AllowWorkloadDisruption lets a migration that would time out pause the guest to finish
	// (false).
	// +optional
	AllowWorkloadDisruption *bool `json:"allowWorkloadDisruption,omitempty"`
	// DisableTLS sends the migration in plaintext (false: TLS with vmlet's migration CA).
	// +optional
	DisableTLS *bool `json:"disableTLS,omitempty"`
	// MatchSELinuxLevelOnMigration gives the migration target's launcher the source's SELinux
	// level (status.selinuxContext), so that both may open shared (RWX) volumes labelled at it;
	// false gives the target a level of its own (KubeVirt: the CRI picks one). Unset: true, as
	// KubeVirt does when its CR leaves it unset.
	// +optional
	MatchSELinuxLevelOnMigration *bool `json:"matchSELinuxLevelOnMigration,omitempty"`
	// Network is the name of a dedicated migration network. Not supported by vmlet: the
	// node addresses are used.
	// +optional
	Network *string `json:"network,omitempty"`
}
