package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vmlet/vmlet/qemu/accel"
)

// readMachine describes this host. Equivalent to nproc, grep 'model name' /proc/cpuinfo,
// uname -r, qemu-system-x86_64 --version, cat /proc/loadavg.
func readMachine(libvirtVersion string) Machine {
	m := Machine{Cores: runtime.NumCPU(), Libvirt: "libvirt " + libvirtVersion, Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		f := strings.Fields(string(b))
		if len(f) > 1 {
			kb, _ := strconv.ParseFloat(f[1], 64)
			m.MemGiB = int(kb/(1<<20) + 0.5)
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.LoadAvgAtStart = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "qemu-system-x86_64", "--version").Output(); err == nil {
		m.QEMU = strings.SplitN(string(out), "\n", 2)[0]
	}
	d := accel.Probe()
	m.Accel = fmt.Sprintf("tcg in every mode (host decision: %s, %s)", d.Accel, d.Reason)
	return m
}

// compareArgv starts one domain with vmlet and one with libvirt (not waiting for the boot),
// records both QEMU command lines and what libvirt's has that vmlet's has not.
func (b *bench) compareArgv(ctx context.Context) error {
	argv := map[string][]string{}
	for _, s := range []stack{b.vmlet, b.libvirt} {
		p, err := s.prepare(ctx, b.guest("sbs-argv-"+s.name()))
		if err != nil {
			return err
		}
		v, err := p.start(ctx)
		if err != nil {
			return undone(fmt.Errorf("start %s for its command line: %w", s.name(), err), "discard", p.discard(ctx))
		}
		cl, rerr := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", v.qemuPID()))
		if err := v.stop(ctx); err != nil {
			return err
		}
		if rerr != nil {
			return fmt.Errorf("read %s qemu command line: %w", s.name(), rerr)
		}
		argv[s.name()] = strings.Split(strings.TrimRight(string(cl), "\x00"), "\x00")
	}
	b.res.VmletArgv, b.res.LibvirtArgv = joinOptions(argv[modeVmlet]), joinOptions(argv[modeLibvirt])
	b.res.LibvirtExtras = ArgvExtras(argv[modeLibvirt], argv[modeVmlet])
	return nil
}

// joinOptions turns an argv into one "-flag value" string per option (argv[0] dropped).
func joinOptions(argv []string) []string {
	var out []string
	for _, a := range argv[1:] {
		if strings.HasPrefix(a, "-") || len(out) == 0 {
			out = append(out, a)
		} else {
			out[len(out)-1] += " " + a
		}
	}
	return out
}

// ArgvExtras lists what the command line a has and b has not: options (by flag) and devices,
// objects and audiodevs (by driver / qom-type), e.g. "-sandbox", "-device ich9-ahci". It is pure.
func ArgvExtras(a, b []string) []string {
	ka, kb := argvKinds(a), argvKinds(b)
	var out []string
	for _, k := range ka {
		if !slices.Contains(kb, k) && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// argvKinds names each option of argv: the flag, and for -device/-object/-audiodev/-chardev/
// -machine also its driver (first value or "driver"/"qom-type" in JSON form).
func argvKinds(argv []string) []string {
	var out []string
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		k := a
		if i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "-") {
			switch a {
			case "-device", "-object", "-audiodev", "-chardev":
				k += " " + optionDriver(argv[i+1])
			}
		}
		out = append(out, k)
	}
	return out
}

// optionDriver extracts the driver of a QEMU option value: {"driver":"x"} / {"qom-type":"x"} /
// {"driver": ...} JSON, or the first comma-separated word (without "driver=").
func optionDriver(v string) string {
	if strings.HasPrefix(v, "{") {
		for _, key := range []string{`"driver":"`, `"qom-type":"`} {
			if _, rest, ok := strings.Cut(v, key); ok {
				d, _, _ := strings.Cut(rest, `"`)
				return d
			}
		}
		return v
	}
	first, _, _ := strings.Cut(v, ",")
	return strings.TrimPrefix(first, "driver=")
}
