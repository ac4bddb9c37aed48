package evacuation

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/migration"
)

// ConfigKey is the key of the cluster-wide evictionStrategy in the ConfigMap that holds the
// migration configuration (migration.ConfigNamespace/ConfigName): KubeVirt's
// spec.configuration.evictionStrategy. Unset: None, as KubeVirt when its CR does not set it.
const ConfigKey = "evictionStrategy"

// ParseStrategy reads the ConfigMap's evictionStrategy value: "" is nil (None), else one of
// KubeVirt's four values.
func ParseStrategy(v string) (*vmletv1.EvictionStrategy, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, nil
	}
	s := vmletv1.EvictionStrategy(v)
	switch s {
	case vmletv1.EvictionStrategyNone, vmletv1.EvictionStrategyLiveMigrate,
		vmletv1.EvictionStrategyLiveMigrateIfPossible, vmletv1.EvictionStrategyExternal:
		return &s, nil
	}
	return nil, fmt.Errorf("ConfigMap %s/%s, key %s: %q is not one of None, LiveMigrate, LiveMigrateIfPossible, External",
		migration.ConfigNamespace, migration.ConfigName, ConfigKey, v)
}

// config is the cluster's default evictionStrategy and migration configuration (defaults when
// the ConfigMap is absent).
func config(ctx context.Context, r client.Reader) (*vmletv1.EvictionStrategy, vmletv1.MigrationConfiguration, error) {
	cm := &corev1.ConfigMap{}
	err := r.Get(ctx, client.ObjectKey{Namespace: migration.ConfigNamespace, Name: migration.ConfigName}, cm)
	if apierrors.IsNotFound(err) {
		return nil, migration.Resolve(vmletv1.MigrationConfiguration{}), nil
	}
	if err != nil {
		return nil, vmletv1.MigrationConfiguration{}, fmt.Errorf("read ConfigMap %s/%s: %w", migration.ConfigNamespace, migration.ConfigName, err)
	}
	s, err := ParseStrategy(cm.Data[ConfigKey])
	if err != nil {
		return nil, vmletv1.MigrationConfiguration{}, err
	}
	mc, err := migration.ParseConfig(cm.Data[migration.ConfigKey])
	return s, mc, err
}
