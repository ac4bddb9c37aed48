package devices

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/vmlet/vmlet/qemu/accel"
	"golang.org/x/sys/unix"
)

// Capabilities are what a node offers launchers.
type Capabilities struct {
	KVM       accel.Decision // accelerator to use; /dev/kvm is granted only if KVM
	Tun       bool           // /dev/net/tun is char 10:200
	VhostNet  bool           // /dev/vhost-net is char 10:238
	Cgroup2   string         // cgroup2 mount point, "" if none
	BPFDevice bool           // a device program with grants map loads (BPF_PROG_LOAD works)
	// Userfaultfd: unprivileged processes may create userfaultfds (vm.unprivileged_userfaultfd
	// is 1), as an unprivileged QEMU receiving a post-copy migration must.
	Userfaultfd bool
	Notes       []string // why a capability is missing
}

// Probe looks at this node. It changes nothing: the BPF check loads a program and maps and
// closes them without attaching.
func Probe() Capabilities {
	c := Capabilities{KVM: accel.Probe()}
	var err error
	if c.Tun, err = isCharDevice("/dev/net/tun", MiscMajor, TunMinor); err != nil {
		c.Notes = append(c.Notes, err.Error())
	}
	if c.VhostNet, err = isCharDevice("/dev/vhost-net", MiscMajor, VhostNetMinor); err != nil {
		c.Notes = append(c.Notes, err.Error())
	}
	if c.Cgroup2, err = FindCgroup2Mount(); err != nil {
		c.Notes = append(c.Notes, err.Error())
	}
	if c.Userfaultfd, err = unprivilegedUserfaultfd(userfaultfdSysctl); err != nil {
		c.Notes = append(c.Notes, err.Error())
	}
	if err := probeBPF(); err != nil {
		c.Notes = append(c.Notes, err.Error())
	} else {
		c.BPFDevice = true
	}
	return c
}

const userfaultfdSysctl = "/proc/sys/vm/unprivileged_userfaultfd"

// unprivilegedUserfaultfd reads vm.unprivileged_userfaultfd at path (absent before Linux 5.2,
// when every process could). Equivalent to: sysctl -n vm.unprivileged_userfaultfd
func unprivilegedUserfaultfd(path string) (bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read vm.unprivileged_userfaultfd: %w", err)
	}
	if v := strings.TrimSpace(string(b)); v != "1" {
		return false, fmt.Errorf("vm.unprivileged_userfaultfd is %s: unprivileged QEMU cannot receive post-copy migrations", v)
	}
	return true, nil
}

// isCharDevice reports whether path is the char device major:minor. Equivalent to: stat -c %t:%T
func isCharDevice(path string, major, minor uint32) (bool, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return false, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != major || unix.Minor(st.Rdev) != minor {
		return false, fmt.Errorf("stat %s: not char %d:%d: %w", path, major, minor, os.ErrInvalid)
	}
	return true, nil
}

// probeBPF loads the program Attach would load for the baseline, then releases it.
func probeBPF() error {
	grants, err := newGrantsMap()
	if err != nil {
		return err
	}
	defer grants.Close()
	static := Canonical(Baseline(BaselineOptions{}))
	rules, err := newRulesMap(static)
	if err != nil {
		return err
	}
	defer rules.Close()
	prog, err := loadProgram(static, grants, rules)
	if err != nil {
		return err
	}
	return prog.Close()
}
