package qemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/vmlet/vmlet/qemu/accel"
)

// ErrInvalidEnv means the Env given to BuildArgv lacks a file descriptor the spec needs.
var ErrInvalidEnv = errors.New("invalid argv environment")

// Env is what BuildArgv needs besides the spec: host facts and the numbers of the file
// descriptors QEMU will inherit. Start fills it; golden tests construct it.
type Env struct {
	// Accel is the host's accelerator decision (accel.Probe).
	Accel accel.Decision
	// DefaultMachine is the emulator's versioned q35 machine (e.g. "pc-q35-7.2", see
	// ProbeEmulator); used when a Migratable spec leaves Machine empty.
	DefaultMachine string
	// BlockDevices lists the ids of SATA disks whose path is a block device (they go on the
	// command line and need the host_device driver).
	BlockDevices map[string]bool
	FDs          FDs
	// Sandbox is QEMU's seccomp filter (-sandbox, see sandboxArgs); nil emits no -sandbox.
	// Start always sets it (StartOptions.Sandbox).
	Sandbox *Sandbox
}

// FDs are the child's file descriptor numbers (3 and up: exec.Cmd.ExtraFiles) of what vmlet
// opened for QEMU. Zero means absent.
type FDs struct {
	QMP       int // listening unix socket of the QMP monitor (required)
	Serial    int // listening unix socket of the serial console
	SerialLog int // serial log file, opened O_WRONLY|O_APPEND
	Agent     int // listening unix socket of the guest agent channel
	Kernel    int // kernel image, when its path is not plain (see NeedsFD)
	Initrd    int // initrd image, when its path is not plain
}

// Resolved is what the spec and the host decided: the accelerator (and why), the machine type
// and the CPU model actually used.
type Resolved struct {
	Accel       accel.Kind
	AccelReason string
	Machine     string
	CPUModel    string
}

// Resolve applies the defaults of spec against env: accelerator, machine type, CPU model.
func Resolve(spec *Spec, env Env) (Resolved, error) {
	var r Resolved
	switch spec.Accel {
	case AccelTCG:
		r.Accel, r.AccelReason = accel.TCG, "spec asks for tcg"
	case AccelKVM:
		if !env.Accel.KVMUsable() {
			return r, fmt.Errorf("resolve accel: %w: %s", ErrKVMUnavailable, env.Accel.Reason)
		}
		r.Accel, r.AccelReason = accel.KVM, "spec asks for kvm; "+env.Accel.Reason
	default:
		if env.Accel.Accel != accel.KVM && env.Accel.Accel != accel.TCG {
			return r, fmt.Errorf("resolve accel: %w: no accelerator decision", ErrInvalidEnv)
		}
		r.Accel, r.AccelReason = env.Accel.Accel, env.Accel.Reason
	}
	r.Machine = spec.Machine
	if r.Machine == "" {
		r.Machine = "q35"
		if spec.Migratable {
			if !versionRe.MatchString(env.DefaultMachine) {
				return r, fmt.Errorf("resolve machine: %w: migratable vm needs a versioned default machine, have %q",
					ErrInvalidEnv, env.DefaultMachine)
			}
			r.Machine = env.DefaultMachine
		}
	}
	r.CPUModel = spec.CPU.Model
	switch {
	case r.CPUModel == "" && spec.Migratable:
		r.CPUModel = DefaultMigratableCPU
	case r.CPUModel == "" && r.Accel == accel.KVM:
		r.CPUModel = "host"
	case r.CPUModel == "":
		r.CPUModel = "max"
	case r.CPUModel == "host" && r.Accel != accel.KVM:
		return r, specErr("cpu.model", "host", "needs kvm")
	}
	return r, nil
}

// NeedsFD reports whether a kernel or initrd path is passed as /dev/fd/N instead of as is.
// Only plain paths ([A-Za-z0-9._/+-]) go on the command line: -initrd is split on commas for
// multiboot kernels, and nothing else about these paths is worth a bet on QEMU's parser.
func NeedsFD(path string) bool {
	for _, r := range path {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '.', r == '_', r == '/', r == '+', r == '-':
		default:
			return true
		}
	}
	return false
}

// BuildArgv returns QEMU's arguments (without argv[0]) for spec. It is pure. The guest is
// created stopped (-S): disks and NICs are not on the command line (except SATA disks, which
// QEMU cannot hotplug) but added over QMP before cont. Sockets are inherited listening fds.
// The boot is strict (-boot strict=on, as libvirt starts every guest): the firmware tries only
// the devices with a bootindex, in its order, and never falls through to the others.
func BuildArgv(spec *Spec, env Env) ([]string, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	r, err := Resolve(spec, env)
	if err != nil {
		return nil, err
	}
	l, err := spec.layout()
	if err != nil {
		return nil, err
	}
	if err := env.FDs.check(spec); err != nil {
		return nil, err
	}
	b := &argv{}
	b.add("-S", "-nodefaults", "-no-user-config", "-nographic")
	b.add("-msg", "timestamp=on")
	if env.Sandbox != nil {
		b.add(sandboxArgs(*env.Sandbox)...)
	}
	b.opt("-name", "guest", spec.Name, "debug-threads", "on")
	if spec.UUID != "" {
		b.add("-uuid", strings.ToLower(spec.UUID))
	}
	b.add("-machine", r.Machine)
	if r.Accel == accel.TCG && spec.TCGCacheMiB > 0 {
		b.opt("-accel", "", "tcg", "tb-size", strconv.Itoa(spec.TCGCacheMiB))
	} else {
		b.add("-accel", string(r.Accel))
	}
	b.add("-cpu", r.CPUModel)
	b.smpArgs(spec.CPU, r.CPUModel)
	b.memoryArgs(spec)
	b.add("-boot", "strict=on")
	if k := spec.Boot.Kernel; k != "" {
		b.add("-kernel", fdOrPath(k, env.FDs.Kernel))
		if i := spec.Boot.Initrd; i != "" {
			b.add("-initrd", fdOrPath(i, env.FDs.Initrd))
		}
		if spec.Boot.Cmdline != "" {
			b.add("-append", spec.Boot.Cmdline)
		}
	}
	b.socketChardev(chardevQMP, env.FDs.QMP, 0)
	b.opt("-mon", "chardev", chardevQMP, "mode", "control")
	if spec.Serial != nil {
		logSet := 0
		if env.FDs.SerialLog != 0 {
			logSet = serialLogSet
			b.opt("-add-fd", "fd", strconv.Itoa(env.FDs.SerialLog), "set", strconv.Itoa(logSet))
		}
		b.socketChardev(chardevSerial, env.FDs.Serial, logSet)
		b.opt("-device", "", "isa-serial", "chardev", chardevSerial, "id", devSerial)
	}
	if spec.Agent != nil {
		b.socketChardev(chardevAgent, env.FDs.Agent, 0)
		b.opt("-device", "", "virtio-serial-pci", "id", devVirtSerial, "bus", "pcie.0", "addr", addrVirtSerial)
		b.opt("-device", "", "virtserialport", "bus", devVirtSerial+".0", "chardev", chardevAgent,
			"name", AgentPortName, "id", devAgentPort)
	}
	if spec.RNG {
		b.opt("-object", "", "rng-random", "id", objRNG, "filename", "/dev/urandom")
		b.opt("-device", "", "virtio-rng-pci", "rng", objRNG, "id", devRNG, "bus", "pcie.0", "addr", addrRNG)
	}
	if bl := spec.Balloon; bl != nil {
		b.opt("-device", "", "virtio-balloon-pci", "id", devBalloon, "bus", "pcie.0", "addr", addrBalloon,
			"free-page-reporting", onOff(bl.FreePageReporting))
	}
	if spec.Graphics != nil {
		// No listener: the clients of Graphics.Socket come in over QMP (add_client).
		b.add("-vnc", "none")
		b.opt("-device", "", "VGA", "id", devVideo, "bus", "pcie.0", "addr", addrVideo)
	}
	b.panicArgs(spec.Panic)
	if spec.needsSCSI() {
		b.opt("-device", "", "virtio-scsi-pci", "id", devSCSI, "bus", "pcie.0", "addr", addrSCSI)
	}
	for p := 1; p <= l.rootPorts; p++ {
		addr, mf := rootPortAddr(p)
		kv := []string{"", "pcie-root-port", "id", rootPortID(p), "bus", "pcie.0", "chassis", strconv.Itoa(p),
			"port", fmt.Sprintf("0x%x", 0x10+p-1), "addr", addr}
		if mf {
			kv = append(kv, "multifunction", "on")
		}
		b.opt("-device", kv...)
	}
	for _, d := range spec.Disks {
		if d = d.withDefaults(); d.Bus != BusSATA {
			continue
		}
		driver := hostDriver(env.BlockDevices[d.ID], d.CDROM)
		b.json("-blockdev", fileNodeArgs(d, driver, d.Path))
		b.json("-blockdev", formatNodeArgs(d))
		b.json("-device", diskDeviceArgs(d, l.slot[d.ID]))
	}
	if spec.Incoming {
		b.add("-incoming", "defer")
	}
	return b.args, nil
}

func (f FDs) check(spec *Spec) error {
	missing := func(what string) error { return fmt.Errorf("build argv: %w: no fd for %s", ErrInvalidEnv, what) }
	switch {
	case f.QMP < 3:
		return missing("qmp socket")
	case spec.Serial != nil && f.Serial < 3:
		return missing("serial socket")
	case spec.Serial != nil && spec.Serial.LogFile != "" && f.SerialLog < 3:
		return missing("serial log")
	case spec.Agent != nil && f.Agent < 3:
		return missing("agent socket")
	case NeedsFD(spec.Boot.Kernel) && f.Kernel < 3:
		return missing("kernel with a non-plain path")
	case spec.Boot.Initrd != "" && NeedsFD(spec.Boot.Initrd) && f.Initrd < 3:
		return missing("initrd with a non-plain path")
	}
	return nil
}

// onOff is a QEMU boolean option value.
func onOff(v bool) string {
	if v {
		return "on"
	}
	return "off"
}

func fdOrPath(path string, fd int) string {
	if fd >= 3 {
		return "/dev/fd/" + strconv.Itoa(fd)
	}
	return path
}

// argv accumulates arguments.
type argv struct{ args []string }

func (b *argv) add(a ...string) { b.args = append(b.args, a...) }

// opt appends flag and a QEMU option string built from key/value pairs; an empty key emits
// the value alone (the implied first option, e.g. a driver name). Values have commas doubled
// (QEMU's escape), although Validate already keeps commas out of every value that gets here.
func (b *argv) opt(flag string, kv ...string) {
	parts := make([]string, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		v := strings.ReplaceAll(kv[i+1], ",", ",,")
		if kv[i] == "" {
			parts = append(parts, v)
		} else {
			parts = append(parts, kv[i]+"="+v)
		}
	}
	b.add(flag, strings.Join(parts, ","))
}

// socketChardev appends a socket chardev that serves on an inherited listening fd.
func (b *argv) socketChardev(id string, fd, logSet int) {
	kv := []string{"", "socket", "id", id, "fd", strconv.Itoa(fd), "server", "on", "wait", "off"}
	if logSet != 0 {
		kv = append(kv, "logfile", "/dev/fdset/"+strconv.Itoa(logSet), "logappend", "on")
	}
	b.opt("-chardev", kv...)
}

// json appends flag with v marshalled as JSON (keys sorted: deterministic output).
func (b *argv) json(flag string, v map[string]any) {
	j, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshal %s: %v", flag, err)) // maps of strings, ints and bools always marshal
	}
	b.add(flag, string(j))
}
