package launcherpod

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/selinuxlabel"
)

// ConfigKeySELinuxLauncherType is the key, in the cluster's vmlet-config ConfigMap (where
// evictionStrategy and migrations live), of the launcher pods' SELinux type: KubeVirt's
// selinuxLauncherType. Unset: none (the container runtime's container_t).
const ConfigKeySELinuxLauncherType = "selinuxLauncherType"

// ErrNoSELinuxContext is a migration source whose status.selinuxContext is not set yet: its
// target cannot be given the source's level.
var ErrNoSELinuxContext = errors.New("the vmi's status.selinuxContext is not set")

var selinuxType = regexp.MustCompile(`^[A-Za-z0-9_.]+$`)

// ParseSELinuxType reads the ConfigMap's selinuxLauncherType value ("" is none). Pure.
func ParseSELinuxType(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v != "" && !selinuxType.MatchString(v) {
		return "", fmt.Errorf("%s %q: not an SELinux type name (e.g. %s)", ConfigKeySELinuxLauncherType, v, selinuxlabel.KubeVirtProcessType)
	}
	return v, nil
}

// TargetSELinuxLevel is the SELinux level a migration target's launcher pod gets (Options.
// SELinuxLevel), KubeVirt's rule: the source's level (from status.selinuxContext), so that
// both launchers may open the volumes they share, unless the migration configuration says
// matchSELinuxLevelOnMigration: false (""; the container runtime picks one). A source on a node
// without SELinux ("none") gives "" too. Pure.
func TargetSELinuxLevel(vmi *vmletv1.VirtualMachineInstance, mc vmletv1.MigrationConfiguration) (string, error) {
	if mc.MatchSELinuxLevelOnMigration != nil && !*mc.MatchSELinuxLevelOnMigration {
		return "", nil
	}
	switch s := vmi.Status.SelinuxContext; s {
	case "none":
		return "", nil
	case "":
		return "", ErrNoSELinuxContext
	default:
		c, err := selinuxlabel.ParseContext(s)
		if err == nil {
			err = selinuxlabel.CheckLevel(c.Level)
		}
		if err != nil {
			return "", fmt.Errorf("migration target level: %w", err)
		}
		return c.Level, nil
	}
}
