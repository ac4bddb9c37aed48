package selinuxlabel

import (
	"bufio"
	"strings"
)

// Modes as the node reports them (getenforce's words, lower case).
const (
	ModeDisabled   = "disabled"
	ModePermissive = "permissive"
	ModeEnforcing  = "enforcing"
)

// State is what the node's SELinux is.
type State struct {
	// Enabled: an SELinux policy is loaded (selinux.GetEnabled). Every process-label call is
	// made only then.
	Enabled bool
	// Mode is ModeDisabled, ModePermissive or ModeEnforcing.
	Mode string
	// PolicyType is /etc/selinux/config's SELINUXTYPE (e.g. "targeted"); "" when disabled or
	// unknown.
	PolicyType string
}

// Enforcing reports whether the node denies what its policy does not allow.
func (s State) Enforcing() bool { return s.Mode == ModeEnforcing }

// PolicyTypeOf reads SELINUXTYPE from an /etc/selinux/config text ("" if absent). Pure.
func PolicyTypeOf(config string) string {
	sc := bufio.NewScanner(strings.NewReader(config))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if ok && strings.TrimSpace(k) == "SELINUXTYPE" {
			return strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	return ""
}
