package qemu

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vmlet/vmlet/test/prereq"
)

func TestParseQ35Alias(t *testing.T) {
	out := []byte("Supported machines are:\nmicrovm              microvm (i386)\n" +
		"q35                  Standard PC (Q35 + ICH9, 2009) (alias of pc-q35-7.2)\n" +
		"pc-q35-7.2           Standard PC (Q35 + ICH9, 2009)\n")
	if m, err := parseQ35Alias(out); err != nil || m != "pc-q35-7.2" {
		t.Fatalf("parseQ35Alias = %q, %v", m, err)
	}
	if _, err := parseQ35Alias([]byte("pc-q35-7.2  Standard PC\n")); !errors.Is(err, ErrInvalidEnv) {
		t.Fatalf("parseQ35Alias without alias: %v", err)
	}
}

func TestDefaultQ35MachineReal(t *testing.T) {
	bin := prereq.QEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := DefaultQ35Machine(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	if !versionRe.MatchString(m) {
		t.Fatalf("DefaultQ35Machine = %q, not versioned", m)
	}
}
