package qemu

import (
	"fmt"
	"strconv"
)

// CPU hotplug plan (pure). With CPU.MaxSockets set, QEMU gets the whole topology up front and
// only socket 0 comes from -smp:
//
//	-smp cpus=C*T,sockets=MAX,cores=C,threads=T,maxcpus=MAX*C*T
//	-device qemu64-x86_64-cpu,id=cpu_s1_c0_t0,socket-id=1,core-id=0,thread-id=0   (one per thread)
//
// QEMU 7.2 insists that sockets*cores*threads equals maxcpus, so -smp names MAX sockets and
// `cpus` is what exists at start. Every other present socket is a -device with the id SetCPUs
// would give it, so that any socket but 0 can be unplugged (QEMU cannot unplug the CPUs -smp
// creates) and a migration target started with the same spec has the same devices.

// cpuHotplug reports whether the spec has CPU hotplug.
func (c CPU) cpuHotplug() bool { return c.MaxSockets > 0 }

// presentSockets is the number of sockets that exist at start.
func (c CPU) presentSockets() int { return max(c.Sockets, 1) + c.PluggedSockets }

// cpuDeviceID is the QEMU id of the vCPU at socket s, core c, thread t. It contains '_', so it
// never collides with a disk or NIC id.
func cpuDeviceID(s, c, t int) string { return fmt.Sprintf("cpu_s%d_c%d_t%d", s, c, t) }

// cpuTypeName is the QOM type of a vCPU of the given model, as query-hotpluggable-cpus names it
// ("qemu64" → "qemu64-x86_64-cpu", "Skylake-Client-v4" → "Skylake-Client-v4-x86_64-cpu").
func cpuTypeName(model string) string { return model + "-x86_64-cpu" }

// cpuSlot is one hot-pluggable vCPU position (query-hotpluggable-cpus props).
type cpuSlot struct{ Socket, Core, Thread int }

// socketSlots lists the vCPU positions of socket s in core, thread order.
func (c CPU) socketSlots(s int) []cpuSlot {
	var out []cpuSlot
	for core := range max(c.Cores, 1) {
		for th := range max(c.Threads, 1) {
			out = append(out, cpuSlot{Socket: s, Core: core, Thread: th})
		}
	}
	return out
}

// smpArgs appends -smp (and, with CPU hotplug, the -device of every present socket but 0).
func (b *argv) smpArgs(c CPU, model string) {
	cores, threads := strconv.Itoa(max(c.Cores, 1)), strconv.Itoa(max(c.Threads, 1))
	if !c.cpuHotplug() {
		b.opt("-smp", "cpus", strconv.Itoa(c.VCPUs()), "sockets", strconv.Itoa(max(c.Sockets, 1)),
			"cores", cores, "threads", threads)
		return
	}
	perSocket := max(c.Cores, 1) * max(c.Threads, 1)
	b.opt("-smp", "cpus", strconv.Itoa(perSocket), "sockets", strconv.Itoa(c.MaxSockets),
		"cores", cores, "threads", threads, "maxcpus", strconv.Itoa(c.MaxSockets*perSocket))
	for s := 1; s < c.presentSockets(); s++ {
		for _, sl := range c.socketSlots(s) {
			b.opt("-device", "", cpuTypeName(model), "id", cpuDeviceID(sl.Socket, sl.Core, sl.Thread),
				"socket-id", strconv.Itoa(sl.Socket), "core-id", strconv.Itoa(sl.Core), "thread-id", strconv.Itoa(sl.Thread))
		}
	}
}

// validateCPUHotplug checks MaxSockets and PluggedSockets.
func (c CPU) validateCPUHotplug() error {
	switch {
	case c.MaxSockets < 0 || c.PluggedSockets < 0:
		return specErr("cpu", fmt.Sprintf("maxSockets %d pluggedSockets %d", c.MaxSockets, c.PluggedSockets), "counts cannot be negative")
	case c.MaxSockets == 0 && c.PluggedSockets > 0:
		return specErr("cpu.pluggedSockets", fmt.Sprint(c.PluggedSockets), "needs cpu hotplug (maxSockets)")
	case c.MaxSockets == 0:
		return nil
	case c.presentSockets() > c.MaxSockets:
		return specErr("cpu.maxSockets", fmt.Sprint(c.MaxSockets),
			fmt.Sprintf("fewer than the %d sockets present at start", c.presentSockets()))
	case c.MaxSockets*max(c.Cores, 1)*max(c.Threads, 1) > MaxVCPUs:
		return specErr("cpu.maxSockets", fmt.Sprint(c.MaxSockets), fmt.Sprintf("at most %d vcpus", MaxVCPUs))
	}
	return nil
}
