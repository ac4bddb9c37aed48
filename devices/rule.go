package devices

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// DeviceType is the kind of device node a rule applies to, as in cgroup-v1 devices.allow.
type DeviceType rune

// Device types.
const (
	BlockDevice DeviceType = 'b'
	CharDevice  DeviceType = 'c'
	AllDevices  DeviceType = 'a' // both block and char
)

// Access is a set of device operations. The values are the kernel's BPF_DEVCG_ACC_* bits, so
// they go into the program and the grants map unchanged.
type Access uint8

// Access bits.
const (
	Mknod Access = 1 << 0 // BPF_DEVCG_ACC_MKNOD: mknod(2) of the node
	Read  Access = 1 << 1 // BPF_DEVCG_ACC_READ: open(2) for reading
	Write Access = 1 << 2 // BPF_DEVCG_ACC_WRITE: open(2) for writing

	ReadWrite Access = Read | Write
	All       Access = Read | Write | Mknod
)

// Wildcard as Major or Minor matches every number ("*" in devices.allow).
const Wildcard int64 = -1

// Largest device numbers the kernel reports to a device program (12-bit major, 20-bit minor).
const (
	MaxMajor = 1<<12 - 1
	MaxMinor = 1<<20 - 1
)

// Rule allows or denies Access to devices of Type with Major:Minor (either may be Wildcard).
//
// A rule set is evaluated as a set, not a list (see Evaluate): an operation is denied if any
// matching deny rule names one of its access bits; otherwise it is allowed if the matching allow
// rules together cover all its bits. Order never matters and adding an allow never takes
// anything away.
type Rule struct {
	Type         DeviceType
	Major, Minor int64
	Access       Access
	Allow        bool
}

// Request is one device operation as the kernel presents it to the program.
type Request struct {
	Type         DeviceType // BlockDevice or CharDevice
	Major, Minor uint32
	Access       Access
}

// Allow returns an allow rule; a shorthand for tables.
func Allow(t DeviceType, major, minor int64, a Access) Rule {
	return Rule{Type: t, Major: major, Minor: minor, Access: a, Allow: true}
}

// Deny returns a deny rule.
func Deny(t DeviceType, major, minor int64, a Access) Rule {
	return Rule{Type: t, Major: major, Minor: minor, Access: a}
}

// String formats a as in devices.allow ("rwm"), "-" when empty.
func (a Access) String() string {
	var b strings.Builder
	if a&Read != 0 {
		b.WriteByte('r')
	}
	if a&Write != 0 {
		b.WriteByte('w')
	}
	if a&Mknod != 0 {
		b.WriteByte('m')
	}
	if a&^All != 0 {
		fmt.Fprintf(&b, "+%#x", uint8(a&^All))
	}
	if b.Len() == 0 {
		return "-"
	}
	return b.String()
}

// ParseAccess parses "rwm"-style access.
func ParseAccess(s string) (Access, error) {
	var a Access
	for _, c := range s {
		switch c {
		case 'r':
			a |= Read
		case 'w':
			a |= Write
		case 'm':
			a |= Mknod
		default:
			return 0, fmt.Errorf("parse access %q: %w", s, ErrInvalidRule)
		}
	}
	return a, nil
}

func number(n int64) string {
	if n == Wildcard {
		return "*"
	}
	return strconv.FormatInt(n, 10)
}

// String formats r as "allow c 1:3 rw" (devices.allow syntax with a verb).
func (r Rule) String() string {
	verb := "deny"
	if r.Allow {
		verb = "allow"
	}
	return fmt.Sprintf("%s %c %s:%s %s", verb, r.Type, number(r.Major), number(r.Minor), r.Access)
}

// ParseRule parses the String form, e.g. "allow c 10:* rwm" or "deny b 7:0 w".
func ParseRule(s string) (Rule, error) {
	f := strings.Fields(s)
	if len(f) != 4 || len(f[1]) != 1 {
		return Rule{}, fmt.Errorf("parse rule %q: %w", s, ErrInvalidRule)
	}
	var r Rule
	switch f[0] {
	case "allow":
		r.Allow = true
	case "deny":
	default:
		return Rule{}, fmt.Errorf("parse rule %q: %w", s, ErrInvalidRule)
	}
	r.Type = DeviceType(f[1][0])
	maj, min, ok := strings.Cut(f[2], ":")
	if !ok {
		return Rule{}, fmt.Errorf("parse rule %q: %w", s, ErrInvalidRule)
	}
	var err error
	if r.Major, err = parseNumber(maj); err != nil {
		return Rule{}, fmt.Errorf("parse rule %q: %w", s, err)
	}
	if r.Minor, err = parseNumber(min); err != nil {
		return Rule{}, fmt.Errorf("parse rule %q: %w", s, err)
	}
	if r.Access, err = ParseAccess(f[3]); err != nil {
		return Rule{}, fmt.Errorf("parse rule %q: %w", s, err)
	}
	return r, r.Validate()
}

func parseNumber(s string) (int64, error) {
	if s == "*" {
		return Wildcard, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse device number %q: %w", s, ErrInvalidRule)
	}
	return n, nil
}

// Validate reports whether r can be compiled: a known type, numbers in the kernel's range or
// Wildcard, and a non-empty access subset of rwm.
func (r Rule) Validate() error {
	switch {
	case r.Type != BlockDevice && r.Type != CharDevice && r.Type != AllDevices:
		return &RuleError{Rule: r, Reason: "type must be b, c or a"}
	case r.Major != Wildcard && (r.Major < 0 || r.Major > MaxMajor):
		return &RuleError{Rule: r, Reason: fmt.Sprintf("major must be * or 0..%d", MaxMajor)}
	case r.Minor != Wildcard && (r.Minor < 0 || r.Minor > MaxMinor):
		return &RuleError{Rule: r, Reason: fmt.Sprintf("minor must be * or 0..%d", MaxMinor)}
	case r.Access == 0 || r.Access&^All != 0:
		return &RuleError{Rule: r, Reason: "access must be a non-empty subset of rwm"}
	}
	return nil
}

// Matches reports whether r's type and numbers cover req's device (access is not considered).
func (r Rule) Matches(req Request) bool {
	return (r.Type == AllDevices || r.Type == req.Type) &&
		(r.Major == Wildcard || r.Major == int64(req.Major)) &&
		(r.Minor == Wildcard || r.Minor == int64(req.Minor))
}

// Canonical returns an equivalent rule set with rules of the same verb and device merged
// (their access ORed), denies first, then sorted by type, major, minor. Under the set semantics
// of Evaluate it decides every request exactly as rules does.
func Canonical(rules []Rule) []Rule {
	type key struct {
		t            DeviceType
		major, minor int64
		allow        bool
	}
	merged := map[key]Access{}
	for _, r := range rules {
		merged[key{r.Type, r.Major, r.Minor, r.Allow}] |= r.Access
	}
	out := make([]Rule, 0, len(merged))
	for k, a := range merged {
		out = append(out, Rule{Type: k.t, Major: k.major, Minor: k.minor, Access: a, Allow: k.allow})
	}
	slices.SortFunc(out, compareRules)
	return out
}

func compareRules(a, b Rule) int {
	if a.Allow != b.Allow {
		if !a.Allow {
			return -1
		}
		return 1
	}
	return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Major, b.Major),
		cmp.Compare(a.Minor, b.Minor), cmp.Compare(a.Access, b.Access))
}

func validateAll(rules []Rule) error {
	for _, r := range rules {
		if err := r.Validate(); err != nil {
			return err
		}
	}
	return nil
}
