package selinuxlabel

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ErrBadContext is a security context or MCS level that does not parse.
var ErrBadContext = errors.New("bad selinux context")

// Context is an SELinux security context user:role:type:level (level may hold colons:
// s0:c1,c2).
type Context struct {
	User, Role, Type, Level string
}

// String is the context as the kernel writes it.
func (c Context) String() string {
	return c.User + ":" + c.Role + ":" + c.Type + ":" + c.Level
}

// ParseContext reads "user:role:type:level" (the level being everything after the third
// colon: an MCS level, or a process's range such as s0-s0:c0.c1023; a context without one is
// refused: vmlet labels only MLS/MCS policies). Plan takes only a plain level (CheckLevel).
// Pure.
func ParseContext(s string) (Context, error) {
	f := strings.SplitN(strings.TrimRight(s, "\x00\n"), ":", 4)
	if len(f) != 4 || f[0] == "" || f[1] == "" || f[2] == "" || !levelSyntax.MatchString(f[3]) {
		return Context{}, fmt.Errorf("%w: %q is not user:role:type:level", ErrBadContext, s)
	}
	return Context{User: f[0], Role: f[1], Type: f[2], Level: f[3]}, nil
}

// levelSyntax is an MLS level or range: sN[:cats][-sN[:cats]], cats of cN, cN.cM, commas.
var levelSyntax = regexp.MustCompile(`^s[0-9]+(:c[0-9]+([.,]c[0-9]+)*)?(-s[0-9]+(:c[0-9]+([.,]c[0-9]+)*)?)?$`)

// MaxCategory is the highest MCS category of the targeted policy (c0..c1023).
const MaxCategory = 1023

// CheckLevel accepts an MCS level as container runtimes assign them: "s0" or "s0:cA,cB,..."
// with categories 0..MaxCategory in increasing order (a range such as "s0-s0:c0.c1023" is a
// process's clearance, not a VM's level, and is refused). Pure.
func CheckLevel(l string) error {
	sens, cats, hasCats := strings.Cut(l, ":")
	if sens != "s0" {
		return fmt.Errorf("%w: level %q: want s0 or s0:cA,cB", ErrBadContext, l)
	}
	if !hasCats {
		return nil
	}
	prev := -1
	for _, c := range strings.Split(cats, ",") {
		n, err := strconv.Atoi(strings.TrimPrefix(c, "c"))
		if !strings.HasPrefix(c, "c") || err != nil || n < 0 || n > MaxCategory || n <= prev {
			return fmt.Errorf("%w: level %q: categories must be c0..c%d, increasing", ErrBadContext, l, MaxCategory)
		}
		prev = n
	}
	return nil
}

// LevelFor is the MCS level vmlet gives a VM's launcher where it chooses one (local mode; a
// migration target that does not keep its source's level): two distinct categories derived
// from seed (the VMI's UID, so an agent restart finds the same level), as container runtimes
// pick a random pair. A level in taken (the node's other launchers') is skipped: the next
// candidate of the same seed is used. Pure.
func LevelFor(seed string, taken map[string]bool) string {
	l := ""
	for i := 0; i < maxTries; i++ {
		sum := sha256.Sum256([]byte(seed + "/" + strconv.Itoa(i)))
		a := int(binary.BigEndian.Uint16(sum[0:2])) % (MaxCategory + 1)
		b := int(binary.BigEndian.Uint16(sum[2:4])) % (MaxCategory + 1)
		if a == b {
			continue
		}
		if a > b {
			a, b = b, a
		}
		l = fmt.Sprintf("s0:c%d,c%d", a, b)
		if !taken[l] {
			return l
		}
	}
	return l // every candidate taken: share one (as a CRI's random pick may)
}

// maxTries bounds LevelFor's search (the node would need thousands of launchers to exhaust it).
const maxTries = 4096
