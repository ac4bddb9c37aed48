package devices

import (
	"errors"
	"fmt"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrInvalidRule: a rule cannot be compiled (see Rule.Validate). *RuleError wraps it.
	ErrInvalidRule = errors.New("invalid device rule")
	// ErrNoCgroup2: no cgroup2 filesystem is mounted.
	ErrNoCgroup2 = errors.New("no cgroup2 mount")
	// ErrNoBPF: the kernel refused to load or attach a BPF_PROG_TYPE_CGROUP_DEVICE program.
	ErrNoBPF = errors.New("cgroup device BPF not available")
	// ErrNotAttached: the cgroup carries no device program of this package.
	ErrNotAttached = errors.New("no vmlet device program attached")
	// ErrForeignProgram: the cgroup carries another device program (runc, systemd). Programs on
	// one cgroup AND each other, so Attach refuses; ReplaceKeeping replaces it.
	ErrForeignProgram = errors.New("foreign device program attached")
	// ErrGrantsFull: the grants map has no room for another entry.
	ErrGrantsFull = errors.New("device grants map full")
	// ErrGrantDeny: Grant was given a deny rule; denies belong to the static rules.
	ErrGrantDeny = errors.New("cannot grant a deny rule")
	// ErrCgroupBusy: processes remained in a cgroup being removed until the deadline.
	ErrCgroupBusy = errors.New("cgroup still populated")
)

// RuleError says which rule is invalid and why. It wraps ErrInvalidRule.
type RuleError struct {
	Rule   Rule
	Reason string
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("invalid device rule %q: %s", e.Rule, e.Reason)
}

// Unwrap returns ErrInvalidRule.
func (e *RuleError) Unwrap() error { return ErrInvalidRule }
