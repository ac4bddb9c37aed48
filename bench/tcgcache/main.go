package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: tcgcache run|render [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = run(os.Args[2:])
	case "render":
		err = renderCmd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (run or render)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcgcache:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	guestDir := fs.String("guest", "", "hack/distroguest/build.sh's output folder (required)")
	sizes := fs.String("sizes", "0,32,64,128,256", "plain QEMU tb-sizes in MiB (0 = QEMU's default, no tb-size)")
	vmletSizes := fs.String("vmlet-sizes", "32", "tb-sizes for the vmlet driver mode (empty = none)")
	rounds := fs.Int("rounds", 3, "rounds; each boots every config once")
	memMiB := fs.Int("memory", 512, "guest RAM (MiB)")
	vcpus := fs.Int("vcpus", 1, "guest vCPUs")
	timeout := fs.Duration("timeout", 10*time.Minute, "per boot (2.5× the slowest boot seen at load 20)")
	out := fs.String("out", "bench/tcgcache.json", "results file (rewritten after every boot)")
	_ = fs.Parse(args)
	if *guestDir == "" {
		return fmt.Errorf("-guest is required (the folder hack/distroguest/build.sh prints)")
	}
	g, err := loadGuest(*guestDir, *memMiB, *vcpus)
	if err != nil {
		return err
	}
	var configs []Config
	for _, m := range []struct{ mode, list string }{{"qemu", *sizes}, {"vmlet", *vmletSizes}} {
		ns, err := parseSizes(m.list)
		if err != nil {
			return err
		}
		for _, n := range ns {
			configs = append(configs, Config{Mode: m.mode, TBSizeMiB: n})
		}
	}
	if len(configs) == 0 {
		return fmt.Errorf("no configs")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res := Results{
		Started: time.Now().UTC().Format(time.RFC3339), Host: hostLine(), Guest: *guestDir + " (" + filepath.Base(g.Kernel) + ")",
		MemoryMiB: g.MemoryMiB, VCPUs: g.VCPUs, Rounds: *rounds, Configs: configs,
	}
	// Warm the host page cache with the image once, so that the first boot reads no more from
	// disk than the others.
	if err := warm(g); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "tcgcache-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()
	total := *rounds * len(configs)
	failed := 0
	for r := 1; r <= *rounds; r++ {
		for i := range configs {
			c := configs[(i+r-1)%len(configs)]
			n := len(res.Boots) + 1
			b, err := boot(ctx, g, c, filepath.Join(work, strconv.Itoa(n)), *timeout)
			b.Round = r
			if err != nil {
				if ctx.Err() != nil {
					return err
				}
				// One failed boot (a timeout when the host is overloaded) is recorded, not fatal.
				b.Err = err.Error()
				failed++
				fmt.Fprintf(os.Stderr, "tcgcache: %d/%d round %d %s FAILED: %v\n", n, total, r, c.Label(), err)
			}
			res.Boots = append(res.Boots, b)
			if err := save(*out, res); err != nil {
				return err
			}
			if b.Err != "" {
				continue
			}
			fmt.Fprintf(os.Stderr, "tcgcache: %d/%d round %d %-22s %6.1f s  CPU %6.1f s  RSS %5.0f MiB  peak %5.0f MiB  load %.2f→%.2f\n",
				n, total, r, c.Label(), b.Seconds, b.CPUSeconds, b.RSSMiB, b.PeakRSSMiB, b.Load1Before, b.Load1After)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d boots failed (recorded in %s)", failed, total, *out)
	}
	return nil
}

func renderCmd(args []string) error {
	fs := flag.NewFlagSet("render", flag.ExitOnError)
	in := fs.String("in", "bench/tcgcache.json", "results file")
	_ = fs.Parse(args)
	b, err := os.ReadFile(*in)
	if err != nil {
		return err
	}
	var res Results
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("parse %s: %w", *in, err)
	}
	fmt.Print(render(res))
	return nil
}

// loadGuest reads the folder hack/distroguest/build.sh made.
func loadGuest(dir string, memMiB, vcpus int) (Guest, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return Guest{}, err
	}
	f, err := os.Open(filepath.Join(dir, "done"))
	if err != nil {
		return Guest{}, fmt.Errorf("read guest: %w (build it with hack/distroguest/build.sh)", err)
	}
	defer func() { _ = f.Close() }()
	g := Guest{Kernel: filepath.Join(dir, "vmlinuz"), Initrd: filepath.Join(dir, "initrd.img"), Root: filepath.Join(dir, "root.raw"), MemoryMiB: memMiB, VCPUs: vcpus}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "cmdline "); ok {
			g.Cmdline = v
		}
	}
	if g.Cmdline == "" {
		return Guest{}, fmt.Errorf("read guest: %s/done has no cmdline line", dir)
	}
	return g, sc.Err()
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad tb-size %q (MiB, 0 = QEMU's default)", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func warm(g Guest) error {
	for _, p := range []string{g.Kernel, g.Initrd, g.Root} {
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("warm page cache: %w", err)
		}
		buf := make([]byte, 1<<20)
		for {
			if _, err := f.Read(buf); err != nil {
				break
			}
		}
		_ = f.Close()
	}
	return nil
}

func save(path string, res Results) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func hostLine() string {
	var u syscall.Utsname
	_ = syscall.Uname(&u)
	rel := utsString(u.Release[:])
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		_, _ = fmt.Sscanf(string(b), "MemTotal: %f kB", &kb)
		mem = fmt.Sprintf(", %.0f GiB", kb/(1<<20))
	}
	ver := "qemu unknown"
	if out, err := exec.Command("qemu-system-x86_64", "--version").Output(); err == nil {
		ver = strings.SplitN(string(out), "\n", 2)[0]
	}
	return fmt.Sprintf("Linux %s, %d cores%s, %s, TCG", rel, runtime.NumCPU(), mem, ver)
}

func utsString(b []int8) string {
	s := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

func itoa(n int) string { return strconv.Itoa(n) }
