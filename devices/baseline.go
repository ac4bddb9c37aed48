package devices

// Device numbers of the nodes a launcher needs (Documentation/admin-guide/devices.txt).
const (
	MiscMajor     = 10
	TunMinor      = 200 // /dev/net/tun
	KVMMinor      = 232 // /dev/kvm
	VhostNetMinor = 238 // /dev/vhost-net
	PTSMajor      = 136 // /dev/pts/*
)

// Disk is a host block device a VM uses.
type Disk struct {
	Major, Minor int64
	ReadOnly     bool
}

// BaselineOptions say which optional devices a launcher gets.
type BaselineOptions struct {
	KVM      bool   // /dev/kvm: only when the VM runs with the KVM accelerator (Probe().KVM)
	VhostNet bool   // /dev/vhost-net: only where it exists (Probe().VhostNet)
	Disks    []Disk // the VM's block devices
}

// Baseline returns the rules for a launcher and its QEMU: null, zero, full, random, urandom,
// tty, ptmx and the pts range for read and write, /dev/net/tun, and what opts asks for. No
// rule grants mknod: device nodes are created by the agent, outside the launcher's cgroup.
func Baseline(opts BaselineOptions) []Rule {
	rules := []Rule{
		Allow(CharDevice, 1, 3, ReadWrite),               // /dev/null
		Allow(CharDevice, 1, 5, ReadWrite),               // /dev/zero
		Allow(CharDevice, 1, 7, ReadWrite),               // /dev/full
		Allow(CharDevice, 1, 8, ReadWrite),               // /dev/random
		Allow(CharDevice, 1, 9, ReadWrite),               // /dev/urandom
		Allow(CharDevice, 5, 0, ReadWrite),               // /dev/tty
		Allow(CharDevice, 5, 2, ReadWrite),               // /dev/ptmx
		Allow(CharDevice, PTSMajor, Wildcard, ReadWrite), // /dev/pts/*
		Allow(CharDevice, MiscMajor, TunMinor, ReadWrite),
	}
	if opts.KVM {
		rules = append(rules, Allow(CharDevice, MiscMajor, KVMMinor, ReadWrite))
	}
	if opts.VhostNet {
		rules = append(rules, Allow(CharDevice, MiscMajor, VhostNetMinor, ReadWrite))
	}
	for _, d := range opts.Disks {
		rules = append(rules, DiskRule(d))
	}
	return rules
}

// DiskRule returns the rule giving a launcher d: read, plus write unless d is read-only.
func DiskRule(d Disk) Rule {
	a := ReadWrite
	if d.ReadOnly {
		a = Read
	}
	return Allow(BlockDevice, d.Major, d.Minor, a)
}

// RuncDefaultRules returns the devices runc allows every container on top of its spec
// (opencontainers/runc libcontainer/specconv AllowedDevices): mknod of any char or block node,
// null, random, full, tty, zero, urandom, the pts range, ptmx and /dev/net/tun with rwm.
// Containers from containerd/CRI also get their spec's devices; pass those alongside.
func RuncDefaultRules() []Rule {
	return []Rule{
		Allow(CharDevice, Wildcard, Wildcard, Mknod),
		Allow(BlockDevice, Wildcard, Wildcard, Mknod),
		Allow(CharDevice, 1, 3, All),               // /dev/null
		Allow(CharDevice, 1, 8, All),               // /dev/random
		Allow(CharDevice, 1, 7, All),               // /dev/full
		Allow(CharDevice, 5, 0, All),               // /dev/tty
		Allow(CharDevice, 1, 5, All),               // /dev/zero
		Allow(CharDevice, 1, 9, All),               // /dev/urandom
		Allow(CharDevice, PTSMajor, Wildcard, All), // /dev/pts/*
		Allow(CharDevice, 5, 2, All),               // /dev/ptmx
		Allow(CharDevice, MiscMajor, TunMinor, All),
	}
}
