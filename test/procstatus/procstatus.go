// Package procstatus reads a process's credentials and confinement from /proc/PID/status, for
// tests that check who a launcher or QEMU runs as.
package procstatus

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Status is the part of /proc/PID/status about privileges.
type Status struct {
	PPid       int
	UID, GID   [4]uint32 // real, effective, saved, filesystem
	Groups     []uint32
	CapInh     uint64
	CapPrm     uint64
	CapEff     uint64
	CapBnd     uint64
	CapAmb     uint64
	NoNewPrivs int
	Seccomp    int // 0 off, 1 strict, 2 filter
}

// Read parses /proc/pid/status. Equivalent to: grep -E 'Uid|Gid|Groups|Cap|NoNewPrivs|Seccomp:' /proc/PID/status
func Read(pid int) (Status, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return Status{}, fmt.Errorf("read status of %d: %w", pid, err)
	}
	var s Status
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		switch k {
		case "Uid", "Gid":
			dst := &s.UID
			if k == "Gid" {
				dst = &s.GID
			}
			for i := 0; i < 4 && i < len(f); i++ {
				n, err := strconv.ParseUint(f[i], 10, 32)
				if err != nil {
					return s, fmt.Errorf("parse %s of %d: %w", k, pid, err)
				}
				dst[i] = uint32(n)
			}
		case "Groups":
			for _, g := range f {
				n, err := strconv.ParseUint(g, 10, 32)
				if err != nil {
					return s, fmt.Errorf("parse Groups of %d: %w", pid, err)
				}
				s.Groups = append(s.Groups, uint32(n))
			}
		case "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb":
			if len(f) != 1 {
				continue
			}
			n, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				return s, fmt.Errorf("parse %s of %d: %w", k, pid, err)
			}
			*map[string]*uint64{"CapInh": &s.CapInh, "CapPrm": &s.CapPrm, "CapEff": &s.CapEff,
				"CapBnd": &s.CapBnd, "CapAmb": &s.CapAmb}[k] = n
		case "PPid", "NoNewPrivs", "Seccomp":
			if len(f) != 1 {
				continue
			}
			n, err := strconv.Atoi(f[0])
			if err != nil {
				return s, fmt.Errorf("parse %s of %d: %w", k, pid, err)
			}
			switch k {
			case "PPid":
				s.PPid = n
			case "Seccomp":
				s.Seccomp = n
			default:
				s.NoNewPrivs = n
			}
		}
	}
	return s, nil
}

// Unprivileged returns what makes s not a process running as uid:gid with no supplementary
// groups, no capabilities in any set and no_new_privs; nil if it is one.
func (s Status) Unprivileged(uid, gid uint32) []string {
	var bad []string
	for i, u := range s.UID {
		if u != uid {
			bad = append(bad, fmt.Sprintf("uid[%d]=%d, want %d", i, u, uid))
		}
	}
	for i, g := range s.GID {
		if g != gid {
			bad = append(bad, fmt.Sprintf("gid[%d]=%d, want %d", i, g, gid))
		}
	}
	if len(s.Groups) > 0 {
		bad = append(bad, fmt.Sprintf("supplementary groups %v, want none", s.Groups))
	}
	for name, c := range map[string]uint64{"CapInh": s.CapInh, "CapPrm": s.CapPrm, "CapEff": s.CapEff, "CapBnd": s.CapBnd, "CapAmb": s.CapAmb} {
		if c != 0 {
			bad = append(bad, fmt.Sprintf("%s=%016x, want 0", name, c))
		}
	}
	if s.NoNewPrivs != 1 {
		bad = append(bad, fmt.Sprintf("NoNewPrivs=%d, want 1", s.NoNewPrivs))
	}
	return bad
}
