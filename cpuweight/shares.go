package cpuweight

import "runtime"

// The kubelet's constants (pkg/kubelet/cm/helpers_linux.go) and cgroup v2's weight range.
const (
	MinShares    = 2      // cgroup v1 cpu.shares minimum; the kubelet's for a pod requesting no CPU
	MaxShares    = 262144 // cgroup v1 cpu.shares maximum
	SharesPerCPU = 1024
	MinWeight    = 1     // cgroup v2 cpu.weight minimum
	MaxWeight    = 10000 // cgroup v2 cpu.weight maximum
)

// NodeShares is Root's cpu.shares against the rest of the host: the kubelet's for kubepods,
// the node's CPUs (here every CPU the process may run on) × 1024, so that vmlet's groups
// together weigh as much as the node's capacity, not as one nice-0 process.
func NodeShares() uint64 { return MilliCPUToShares(int64(runtime.NumCPU()) * 1000) }

// SystemShares is the system group's cpu.shares (the agent and the local control plane): the
// maximum, so that under contention they run before any guest (they use little; weights are
// work-conserving). On v2 it is SharesToWeight(SystemShares) = MaxWeight.
const SystemShares = MaxShares

// LauncherShares is the launchers group's cpu.shares (v1): all launchers together weigh as
// the system group, so that a launcher, mostly asleep, runs as soon as it wakes.
const LauncherShares = SystemShares

// VCPUShares is the vcpus group's cpu.shares within its VM: the minimum, so that the
// launcher's and QEMU's other threads (weight 1024 each on v1) run first when they are
// runnable, and the vCPUs get the whole VM's share otherwise.
const VCPUShares = MinShares

// MilliCPUToShares is the kubelet's MilliCPUToShares: a CPU request in milli-CPUs to cgroup v1
// cpu.shares, milli*1024/1000 clamped to [MinShares, MaxShares]; no request (0) is MinShares.
func MilliCPUToShares(milli int64) uint64 {
	if milli <= 0 {
		return MinShares
	}
	if milli > MaxShares*1000/SharesPerCPU {
		return MaxShares
	}
	return uint64(max(milli*SharesPerCPU/1000, MinShares))
}

// SharesToWeight is runc's (and the kubelet's, through it) cgroup v1 shares to cgroup v2
// cpu.weight conversion, 1 + (shares-2)*9999/262142, mapping [2, 262144] onto [1, 10000]
// linearly (1024 shares → weight 39). Out-of-range shares are clamped first.
func SharesToWeight(shares uint64) uint64 {
	shares = min(max(shares, MinShares), MaxShares)
	return 1 + (shares-MinShares)*(MaxWeight-MinWeight)/(MaxShares-MinShares)
}

// Plan is the CPU weight of one VM's groups, as cgroup v1 shares (Weight converts).
type Plan struct {
	Shares     uint64 // the VM's group
	VCPUShares uint64 // its vcpus child
}

// PlanVM is the plan of a VM whose launcher requests milli milli-CPUs: the kubelet's shares for
// a pod with that request, and VCPUShares for the vCPUs.
func PlanVM(milli int64) Plan {
	return Plan{Shares: MilliCPUToShares(milli), VCPUShares: VCPUShares}
}
