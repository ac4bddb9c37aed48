package qemu

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
)

// DefaultBinary is the emulator Start runs when StartOptions.Binary is empty (looked up in
// PATH).
const DefaultBinary = "qemu-system-x86_64"

var q35AliasRe = regexp.MustCompile(`(?m)^q35\s.*\(alias of (pc-q35-[0-9]+\.[0-9]+)\)`)

// DefaultQ35Machine returns the versioned machine type the emulator's "q35" alias points at
// (e.g. "pc-q35-7.2"), what a Migratable spec gets when it names none. ctx bounds the run.
//
// Equivalent to: qemu-system-x86_64 -machine help | grep '^q35'
func DefaultQ35Machine(ctx context.Context, binary string) (string, error) {
	if binary == "" {
		binary = DefaultBinary
	}
	out, err := exec.CommandContext(ctx, binary, "-machine", "help").Output()
	if err != nil {
		return "", fmt.Errorf("list machine types: %w", err)
	}
	return parseQ35Alias(out)
}

func parseQ35Alias(out []byte) (string, error) {
	m := q35AliasRe.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("list machine types: %w: no q35 alias in %q", ErrInvalidEnv, shorten(string(bytes.TrimSpace(out)), 200))
	}
	return string(m[1]), nil
}

var emulatorVersionRe = regexp.MustCompile(`(?m)^QEMU emulator version (\S.*?)\s*$`)

// Version returns the emulator's version as `--version` prints it after "QEMU emulator
// version" (e.g. "7.2.19 (Debian 1:7.2+dfsg-7+deb12u18)"). ctx bounds the run.
//
// Equivalent to: qemu-system-x86_64 --version | head -1
func Version(ctx context.Context, binary string) (string, error) {
	if binary == "" {
		binary = DefaultBinary
	}
	out, err := exec.CommandContext(ctx, binary, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("qemu version: %w", err)
	}
	return parseVersion(out)
}

func parseVersion(out []byte) (string, error) {
	m := emulatorVersionRe.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("qemu version: %w: no version in %q", ErrInvalidEnv, shorten(string(bytes.TrimSpace(out)), 200))
	}
	return string(m[1]), nil
}
