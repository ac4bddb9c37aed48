package qemu

import (
	"context"
	"errors"
	"regexp"
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

func TestParseVersion(t *testing.T) {
	out := []byte("QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)\nCopyright (c) 2003-2022 Fabrice Bellard and the QEMU Project developers\n")
	if v, err := parseVersion(out); err != nil || v != "7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)" {
		t.Fatalf("parseVersion = %q, %v", v, err)
	}
	if _, err := parseVersion([]byte("qemu-img version 7.2.22\n")); !errors.Is(err, ErrInvalidEnv) {
		t.Fatalf("parseVersion of another tool: %v", err)
	}
}

func TestVersionReal(t *testing.T) {
	bin := prereq.QEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := Version(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+`).MatchString(v) {
		t.Fatalf("Version = %q, does not start with major.minor.micro", v)
	}
}
