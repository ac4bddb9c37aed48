package selinuxlabel

import (
	"os"

	"github.com/opencontainers/selinux/go-selinux"
)

// configFile is where the policy type is configured.
const configFile = "/etc/selinux/config"

// Probe looks at this node's SELinux: enabled, its enforcing mode and policy type. It changes
// nothing. Equivalent to: getenforce; sestatus | grep 'Loaded policy name'
func Probe() State {
	if !selinux.GetEnabled() {
		return State{Mode: ModeDisabled}
	}
	s := State{Enabled: true, Mode: ModePermissive}
	if selinux.EnforceMode() == selinux.Enforcing {
		s.Mode = ModeEnforcing
	}
	if b, err := os.ReadFile(configFile); err == nil {
		s.PolicyType = PolicyTypeOf(string(b))
	}
	return s
}
