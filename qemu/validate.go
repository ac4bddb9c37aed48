package qemu

import (
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Allowed alphabets. User ids never contain '_': vmlet's own QEMU ids (root ports, node names,
// chardevs) all do, so a user id can never collide with one. Every id that reaches QEMU must
// start with a letter (QEMU's id_wellformed), and block node names are limited to 31 bytes, so
// device ids are at most 28 bytes ("f_" + id).
var (
	idRe       = regexp.MustCompile(`^[a-z][a-z0-9-]{0,27}$`)
	nameRe     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`)
	uuidRe     = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	machineRe  = regexp.MustCompile(`^(q35|pc-q35-[0-9]+\.[0-9]+)$`)
	versionRe  = regexp.MustCompile(`^pc-q35-[0-9]+\.[0-9]+$`)
	cpuModelRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	serialRe   = regexp.MustCompile(`^[A-Za-z0-9._-]{1,20}$`)
	tapNameRe  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$`)
)

// Limits enforced by Validate.
const (
	MaxVCPUs       = 288     // q35 limit
	MinMemoryMiB   = 16      //
	MaxMemoryMiB   = 4 << 20 // 4 TiB
	MaxRootPorts   = 32      // root ports at slots 0x10–0x13, 8 functions each
	MaxCmdlineLen  = 2047    // x86 COMMAND_LINE_SIZE minus the NUL
	maxPathLen     = 4095
	maxSunPathLen  = 107 // sizeof(sun_path) minus the NUL
	maxNICQueues   = 16
	maxTCGCacheMiB = 4096
	// maxBalloonStatsPeriod bounds Balloon.StatsPeriodSeconds (a day; QEMU takes any int64).
	maxBalloonStatsPeriod = 86400
)

// Validate checks the whole spec and returns the first problem as a *SpecError (which wraps
// ErrInvalidSpec). A valid spec cannot inject anything into QEMU's command line: every string
// that reaches an option is from a restricted alphabet, and the free-form ones (paths) reach
// QEMU only as QMP JSON or as file descriptors.
func (s *Spec) Validate() error {
	if !nameRe.MatchString(s.Name) {
		return specErr("name", s.Name, "must be 1-253 of [A-Za-z0-9._-] starting with a letter or digit")
	}
	if s.UUID != "" && !uuidRe.MatchString(s.UUID) {
		return specErr("uuid", s.UUID, "must be 8-4-4-4-12 hex")
	}
	if s.Machine != "" && !machineRe.MatchString(s.Machine) {
		return specErr("machine", s.Machine, `must be "q35" or "pc-q35-X.Y"`)
	}
	if s.Migratable && s.Machine == "q35" {
		return specErr("machine", s.Machine, "a migratable vm needs a versioned machine type (pc-q35-X.Y) or empty")
	}
	switch s.Accel {
	case AccelAuto, AccelKVM, AccelTCG:
	default:
		return specErr("accel", string(s.Accel), `must be "", "kvm" or "tcg"`)
	}
	if s.TCGCacheMiB < 0 || s.TCGCacheMiB > maxTCGCacheMiB {
		return specErr("tcgCacheMiB", fmt.Sprint(s.TCGCacheMiB), fmt.Sprintf("must be 0-%d", maxTCGCacheMiB))
	}
	if err := s.validateCPU(); err != nil {
		return err
	}
	if b := s.Balloon; b != nil && (b.StatsPeriodSeconds < 0 || b.StatsPeriodSeconds > maxBalloonStatsPeriod) {
		return specErr("balloon.statsPeriodSeconds", fmt.Sprint(b.StatsPeriodSeconds), fmt.Sprintf("must be 0-%d", maxBalloonStatsPeriod))
	}
	if s.MemoryMiB < MinMemoryMiB || s.MemoryMiB > MaxMemoryMiB {
		return specErr("memoryMiB", fmt.Sprint(s.MemoryMiB), fmt.Sprintf("must be %d-%d", MinMemoryMiB, MaxMemoryMiB))
	}
	if err := s.validateMemoryHotplug(); err != nil {
		return err
	}
	if err := s.Boot.validate(); err != nil {
		return err
	}
	if err := s.validateDevices(); err != nil {
		return err
	}
	if err := s.validatePanic(); err != nil {
		return err
	}
	return s.validateSockets()
}

func (s *Spec) validateCPU() error {
	c := s.CPU
	if c.Model != "" && !cpuModelRe.MatchString(c.Model) {
		return specErr("cpu.model", c.Model, "must be 1-64 of [A-Za-z0-9._-]")
	}
	if s.Migratable && (c.Model == "host" || c.Model == "max") {
		return specErr("cpu.model", c.Model, "a migratable vm needs a named cpu model")
	}
	if c.Sockets < 0 || c.Cores < 0 || c.Threads < 0 {
		return specErr("cpu", fmt.Sprintf("%d/%d/%d", c.Sockets, c.Cores, c.Threads), "counts cannot be negative")
	}
	if n := c.VCPUs(); n > MaxVCPUs {
		return specErr("cpu", fmt.Sprint(n), fmt.Sprintf("at most %d vcpus", MaxVCPUs))
	}
	return c.validateCPUHotplug()
}

func (b Boot) validate() error {
	if b.Kernel == "" {
		if b.Initrd != "" || b.Cmdline != "" {
			return specErr("boot.kernel", "", "initrd and cmdline need a kernel")
		}
		return nil
	}
	if err := checkPath("boot.kernel", b.Kernel); err != nil {
		return err
	}
	if b.Initrd != "" {
		if err := checkPath("boot.initrd", b.Initrd); err != nil {
			return err
		}
	}
	if len(b.Cmdline) > MaxCmdlineLen {
		return specErr("boot.cmdline", b.Cmdline, fmt.Sprintf("longer than %d bytes", MaxCmdlineLen))
	}
	for _, r := range b.Cmdline {
		if r < 0x20 || r > 0x7e {
			return specErr("boot.cmdline", b.Cmdline, "only printable ASCII is allowed")
		}
	}
	return nil
}

func (s *Spec) validateSockets() error {
	seen := map[string]string{}
	check := func(field, p string) error {
		if err := checkSocketPath(field, p); err != nil {
			return err
		}
		if other, dup := seen[p]; dup {
			return specErr(field, p, "same path as "+other)
		}
		seen[p] = field
		return nil
	}
	if s.Serial != nil {
		if err := check("serial.socket", s.Serial.Socket); err != nil {
			return err
		}
		if s.Serial.LogFile != "" {
			if err := checkPath("serial.logFile", s.Serial.LogFile); err != nil {
				return err
			}
		}
	}
	if s.Agent != nil {
		if err := check("agent.socket", s.Agent.Socket); err != nil {
			return err
		}
	}
	if s.Graphics != nil {
		if err := check("graphics.socket", s.Graphics.Socket); err != nil {
			return err
		}
	}
	return nil
}

// checkPath accepts absolute, clean, valid UTF-8 paths without control characters. Commas,
// quotes, '=' and spaces are fine: paths never reach a QEMU option string.
func checkPath(field, p string) error {
	switch {
	case p == "":
		return specErr(field, p, "is required")
	case len(p) > maxPathLen:
		return specErr(field, p, fmt.Sprintf("longer than %d bytes", maxPathLen))
	case !filepath.IsAbs(p) || filepath.Clean(p) != p:
		return specErr(field, p, "must be an absolute clean path")
	case !utf8.ValidString(p) || hasControl(p):
		return specErr(field, p, "must be valid UTF-8 without control characters")
	case p == "/dev/fdset" || strings.HasPrefix(p, "/dev/fdset/"):
		return specErr(field, p, "/dev/fdset is QEMU's fd-passing namespace")
	}
	return nil
}

func checkSocketPath(field, p string) error {
	if err := checkPath(field, p); err != nil {
		return err
	}
	if len(p) > maxSunPathLen {
		return specErr(field, p, fmt.Sprintf("unix socket paths are limited to %d bytes", maxSunPathLen))
	}
	return nil
}

func checkID(field, id string) error {
	if !idRe.MatchString(id) {
		return specErr(field, id, "must be 1-28 of [a-z0-9-] starting with a letter")
	}
	return nil
}

func checkMAC(field, mac string) error {
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 || len(mac) != 17 || strings.ContainsAny(mac, "-.") {
		return specErr(field, mac, "must be six colon-separated hex bytes")
	}
	if hw[0]&1 != 0 {
		return specErr(field, mac, "must be a unicast address")
	}
	return nil
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return true
		}
	}
	return false
}

func specErr(field, value, reason string) error {
	return &SpecError{Field: field, Value: value, Reason: reason}
}
