package accel

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// Kind is a QEMU accelerator name as given to -accel.
type Kind string

// Accelerators vmlet chooses between.
const (
	KVM Kind = "kvm"
	TCG Kind = "tcg"
)

// Facts are the host observations the decision is made from. Gather them with ReadFacts;
// tests construct them directly.
type Facts struct {
	CPUVirtFlag   bool  // /proc/cpuinfo lists vmx or svm
	PVMModule     bool  // /sys/module/kvm_pvm exists (nested PVM: KVM present but unusable)
	DevKVMErr     error // error opening /dev/kvm, nil if it opened
	KVMAPIVersion int   // KVM_GET_API_VERSION result when /dev/kvm opened
}

// Decision is the chosen accelerator and why.
type Decision struct {
	Accel  Kind
	Reason string
}

// KVMUsable reports whether the decision is KVM.
func (d Decision) KVMUsable() bool { return d.Accel == KVM }

// Decide applies the rule to facts. It is pure.
func Decide(f Facts) Decision {
	switch {
	case f.PVMModule:
		return Decision{TCG, "kvm_pvm module loaded: nested PVM KVM cannot run real guests"}
	case !f.CPUVirtFlag:
		return Decision{TCG, "cpu has no vmx/svm flag"}
	case f.DevKVMErr != nil:
		return Decision{TCG, fmt.Sprintf("/dev/kvm unusable: %v", f.DevKVMErr)}
	case f.KVMAPIVersion != 12:
		return Decision{TCG, fmt.Sprintf("unexpected KVM API version %d", f.KVMAPIVersion)}
	default:
		return Decision{KVM, "cpu virtualization flag present and /dev/kvm answers"}
	}
}

// Probe reads the host facts and decides.
func Probe() Decision { return Decide(ReadFacts()) }

const kvmGetAPIVersion = 0xAE00 // _IO(KVMIO, 0x00)

// ReadFacts gathers Facts from /proc, /sys and /dev/kvm.
func ReadFacts() Facts {
	var f Facts
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		f.CPUVirtFlag = cpuinfoHasVirt(b)
	}
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		f.PVMModule = true
	}
	fd, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("open /dev/kvm: %w", fs.ErrNotExist)
		}
		f.DevKVMErr = err
		return f
	}
	defer unix.Close(fd)
	v, err := unix.IoctlRetInt(fd, kvmGetAPIVersion)
	if err != nil {
		f.DevKVMErr = fmt.Errorf("KVM_GET_API_VERSION: %w", err)
		return f
	}
	f.KVMAPIVersion = v
	return f
}

func cpuinfoHasVirt(b []byte) bool {
	s := bufio.NewScanner(bytes.NewReader(b))
	s.Buffer(make([]byte, 64*1024), 1<<20)
	for s.Scan() {
		line := s.Bytes()
		if !bytes.HasPrefix(line, []byte("flags")) {
			continue
		}
		for _, w := range bytes.Fields(line) {
			if bytes.Equal(w, []byte("vmx")) || bytes.Equal(w, []byte("svm")) {
				return true
			}
		}
	}
	return false
}
