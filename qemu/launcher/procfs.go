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

// cpuTimes are a task's user and system time in nanoseconds.
type cpuTimes struct{ User, System uint64 }

// parseStat reads utime and stime from a /proc/<pid>/stat or /proc/<pid>/task/<tid>/stat
// line. The command name (field 2) may contain spaces and parentheses: fields are counted
// after the last ')'.
func parseStat(b []byte) (cpuTimes, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return cpuTimes{}, fmt.Errorf("parse stat: no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// After ')': state(3) ppid(4) ... utime(14) stime(15): indexes 11 and 12 here.
	if len(f) < 13 {
		return cpuTimes{}, fmt.Errorf("parse stat: %d fields", len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return cpuTimes{}, fmt.Errorf("parse stat: utime %q stime %q", f[11], f[12])
	}
	const ns = 1_000_000_000 / clockTicks
	return cpuTimes{User: u * ns, System: s * ns}, nil
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
	RxBytes, RxPackets, RxDropped uint64
	TxBytes, TxPackets, TxDropped uint64
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
		return netDev{RxBytes: v[0], RxPackets: v[1], RxDropped: v[3], TxBytes: v[8], TxPackets: v[9], TxDropped: v[11]}, nil
	}
	return netDev{}, fmt.Errorf("parse net dev: %w: no interface %s", ErrUnknownDevice, iface)
}
