package devices

import (
	"errors"
	"slices"
	"testing"
)

func TestParseRuleRoundTrip(t *testing.T) {
	for _, s := range []string{
		"allow c 1:3 rw", "deny b 7:* w", "allow a *:* m", "allow c 136:* rwm", "deny c *:5 r",
	} {
		r, err := ParseRule(s)
		if err != nil {
			t.Fatalf("ParseRule(%q): %v", s, err)
		}
		if got := r.String(); got != s {
			t.Errorf("ParseRule(%q).String() = %q", s, got)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	for _, r := range []Rule{
		{Type: 'x', Major: 1, Minor: 3, Access: Read, Allow: true},
		{Type: CharDevice, Major: MaxMajor + 1, Minor: 0, Access: Read},
		{Type: CharDevice, Major: -2, Minor: 0, Access: Read},
		{Type: CharDevice, Major: 1, Minor: MaxMinor + 1, Access: Read},
		{Type: CharDevice, Major: 1, Minor: 3, Access: 0},
		{Type: CharDevice, Major: 1, Minor: 3, Access: 8},
	} {
		err := r.Validate()
		var re *RuleError
		if !errors.Is(err, ErrInvalidRule) || !errors.As(err, &re) || re.Rule != r {
			t.Errorf("Validate(%+v) = %v, want *RuleError wrapping ErrInvalidRule", r, err)
		}
		if _, err := Compile([]Rule{r}, CompileOptions{}); !errors.Is(err, ErrInvalidRule) {
			t.Errorf("Compile(%+v) = %v, want ErrInvalidRule", r, err)
		}
	}
	for _, s := range []string{"allow c 1 rw", "permit c 1:3 r", "allow c 1:3 rx", "allow cc 1:3 r", "allow c x:3 r"} {
		if _, err := ParseRule(s); !errors.Is(err, ErrInvalidRule) {
			t.Errorf("ParseRule(%q) = %v, want ErrInvalidRule", s, err)
		}
	}
}

func TestCanonicalMergesAndSorts(t *testing.T) {
	got := Canonical([]Rule{
		Allow(CharDevice, 1, 3, Write),
		Deny(BlockDevice, 7, Wildcard, Write),
		Allow(CharDevice, 1, 3, Read),
		Allow(BlockDevice, 7, 0, Read),
	})
	want := []Rule{
		Deny(BlockDevice, 7, Wildcard, Write),
		Allow(BlockDevice, 7, 0, Read),
		Allow(CharDevice, 1, 3, ReadWrite),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Canonical = %v, want %v", got, want)
	}
}
