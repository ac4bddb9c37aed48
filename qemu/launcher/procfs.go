package launcher

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Pure parsers for the /proc files DomainStats reads.

// clockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat: 100 on every Linux
// architecture vmlet runs on (sysconf(_SC_CLK_TCK) is fixed by the kernel ABI).
const clockTicks = 100

// taskStat is what DomainStats reads from a task's stat line: user and system time in
// nanoseconds, and the page faults that needed no I/O (minor) and those that did (major).
type taskStat struct {
	User, System   uint64
	MinFlt, MajFlt uint64
}

// parseStat reads minflt, majflt, utime and stime from a /proc/<pid>/stat or
// /proc/<pid>/task/<tid>/stat line. The command name (field 2) may contain spaces and
// parentheses: fields are counted after the last ')'.
func parseStat(b []byte) (taskStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return taskStat{}, fmt.Errorf("parse stat: no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// After ')': state(3) ppid(4) pgrp(5) session(6) tty_nr(7) tpgid(8) flags(9) minflt(10)
	// cminflt(11) majflt(12) cmajflt(13) utime(14) stime(15): field n is f[n-3].
	if len(f) < 13 {
		return taskStat{}, fmt.Errorf("parse stat: %d fields", len(f))
	}
	var v [4]uint64
	for j, n := range []int{10, 12, 14, 15} {
		x, err := strconv.ParseUint(f[n-3], 10, 64)
		if err != nil {
			return taskStat{}, fmt.Errorf("parse stat field %d %q: %w", n, f[n-3], err)
		}
		v[j] = x
	}
	const ns = 1_000_000_000 / clockTicks
	return taskStat{MinFlt: v[0], MajFlt: v[1], User: v[2] * ns, System: v[3] * ns}, nil
}

// parseSchedstat reads run_delay, the second field of /proc/<pid>/task/<tid>/schedstat
// ("sum_exec_runtime run_delay pcount", nanoseconds): the time the task was runnable but
// waited for a CPU. libvirt's vcpu.N.delay (qemuGetSchedstatDelay) is this field. The file
// exists with CONFIG_SCHED_INFO.
func parseSchedstat(b []byte) (uint64, error) {
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, fmt.Errorf("parse schedstat: %d fields", len(f))
	}
	v, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse schedstat run_delay: %w", err)
	}
	return v, nil
}

// parseSchedWait reads wait_sum from /proc/<pid>/task/<tid>/sched, in nanoseconds, as libvirt's
// vcpu.N.wait (virProcessGetSchedInfo): the line "se.statistics.wait_sum" (older kernels) or
// "se.wait_sum", whose value is milliseconds with a fraction. The line exists only with
// CONFIG_SCHEDSTATS (and the file with CONFIG_SCHED_DEBUG): ok is false without it.
func parseSchedWait(b []byte) (ns uint64, ok bool, err error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, val, found := strings.Cut(sc.Text(), ":")
		if !found {
			continue
		}
		switch strings.TrimSpace(name) {
		case "se.statistics.wait_sum", "se.wait_sum":
		default:
			continue
		}
		ms, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return 0, false, fmt.Errorf("parse sched wait_sum: %w", err)
		}
		if ms < 0 {
			return 0, false, fmt.Errorf("parse sched wait_sum: negative %q", strings.TrimSpace(val))
		}
		return uint64(ms * 1e6), true, nil
	}
	return 0, false, nil
}

// memRollup is /proc/<pid>/smaps_rollup in bytes.
type memRollup struct{ RSS, PSS uint64 }

// parseSmapsRollup reads Rss and Pss (kB) from smaps_rollup.
func parseSmapsRollup(b []byte) (memRollup, error) {
	var m memRollup
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		var dst *uint64
		switch f[0] {
		case "Rss:":
			dst = &m.RSS
		case "Pss:":
			dst = &m.PSS
		default:
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return m, fmt.Errorf("parse smaps_rollup %s: %w", f[0], err)
		}
		*dst = v << 10
		seen++
	}
	if seen < 2 {
		return m, fmt.Errorf("parse smaps_rollup: no Rss/Pss lines")
	}
	return m, nil
}

// netDev is one interface line of /proc/net/dev.
type netDev struct {
	RxBytes, RxPackets, RxErrors, RxDropped uint64
	TxBytes, TxPackets, TxErrors, TxDropped uint64
}

// parseNetDev finds iface in /proc/net/dev content.
//
//	Inter-|   Receive                                                |  Transmit
//	 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop ...
//	  tap0:  1234      10    0    0    0     0          0         0    5678      20    0    0 ...
func parseNetDev(b []byte, iface string) (netDev, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(name) != iface {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 12 {
			return netDev{}, fmt.Errorf("parse net dev %s: %d fields", iface, len(f))
		}
		var v [12]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return netDev{}, fmt.Errorf("parse net dev %s field %d: %w", iface, i, err)
			}
			v[i] = n
		}
		return netDev{RxBytes: v[0], RxPackets: v[1], RxErrors: v[2], RxDropped: v[3],
			TxBytes: v[8], TxPackets: v[9], TxErrors: v[10], TxDropped: v[11]}, nil
	}
	return netDev{}, fmt.Errorf("parse net dev: %w: no interface %s", ErrUnknownDevice, iface)
}
