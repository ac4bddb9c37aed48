package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vmlet/vmlet/qemu"
)

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "run":
		os.Exit(runMain(os.Args[2:]))
	case "render":
		os.Exit(renderMain(os.Args[2:]))
	case "reap":
		os.Exit(reapMain(os.Args[2:]))
	default:
		usage(os.Stderr)
		os.Exit(2)
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, `usage:
  sidebyside run -launcher BIN [-rounds 10] [-phases start,pause,memory,migrate] [-out results.json] [-gobench-dir DIR]
  sidebyside render -in results.json
  sidebyside reap -- CMD [ARGS...]   (internal: child subreaper for libvirtd)`)
}

// bench is one run's state.
type bench struct {
	rounds  int
	dir     string // work folder, owned by nobody
	files   Guest  // kernel, initrd, cmdline, sizes: the template of every guest
	vmlet   *vmletStack
	libvirt *libvirtMode
	bare    *bareMode
	lv      *libvirtStack
	res     *Results
	start   time.Time
	errs    []error // cleanup errors: reported, and make the run fail
}

func runMain(args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	launcherBin := fs.String("launcher", "", "vmlet-launcher binary (required; built with CGO_ENABLED=0)")
	rounds := fs.Int("rounds", 10, "rounds per comparison (at least 10 for the published numbers)")
	phases := fs.String("phases", "start,pause,memory,migrate", "comma-separated phases to run")
	out := fs.String("out", "bench/results.json", "where the JSON results go")
	gobench := fs.String("gobench-dir", "", "folder of `go test -bench` outputs (*.txt) to embed in the JSON")
	keep := fs.Bool("keep", false, "keep the work folder (logs, libvirt's QEMU logs) for inspection")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *launcherBin == "" || *rounds < 1 {
		usage(os.Stderr)
		return 2
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "sidebyside: needs root (to run every QEMU and daemon as nobody)")
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	b := &bench{rounds: *rounds, start: time.Now(), res: &Results{Rounds: *rounds}}
	err := b.run(ctx, *launcherBin, strings.Split(*phases, ","), *keep)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sidebyside: %v\n", err)
	}
	for _, e := range b.errs {
		fmt.Fprintf(os.Stderr, "sidebyside: cleanup: %v\n", e)
	}
	if err != nil || len(b.errs) > 0 {
		return 1
	}
	if *gobench != "" {
		b.res.GoBenchmarks = readGoBench(*gobench)
	}
	b.res.DurationSec = time.Since(b.start).Seconds()
	data, err := json.MarshalIndent(b.res, "", "  ")
	if err == nil {
		err = os.WriteFile(*out, append(data, '\n'), 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sidebyside: write results: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "sidebyside: results in %s (%.0f s)\n", *out, b.res.DurationSec)
	return 0
}

// run sets up (work folder, guest, launcher binary, libvirt daemons), runs the phases and
// tears everything down, whatever happened.
func (b *bench) run(ctx context.Context, launcherBin string, phases []string, keep bool) (err error) {
	b.dir, err = os.MkdirTemp("", "sbs-")
	if err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	defer func() {
		if !keep {
			b.cleanupErr(os.RemoveAll(b.dir))
		} else {
			fmt.Fprintf(os.Stderr, "sidebyside: kept %s\n", b.dir)
		}
	}()
	if err := chownNobody(b.dir, 0o755); err != nil {
		return err
	}
	if err := b.setupFiles(ctx, launcherBin); err != nil {
		return err
	}
	machine, err := qemu.DefaultQ35Machine(ctx, "")
	if err != nil {
		return err
	}
	b.vmlet = &vmletStack{bin: filepath.Join(b.dir, "bin", "vmlet-launcher"), dir: b.dir}
	b.bare = &bareMode{dir: filepath.Join(b.dir, "bare"), machine: machine}
	if err := mkdirNobody(b.bare.dir); err != nil {
		return err
	}
	b.progress("setup", -1, "starting virtlogd and libvirtd (session mode, as nobody) under %s", filepath.Join(b.dir, "lv"))
	lctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	b.lv, err = startLibvirt(lctx, filepath.Join(b.dir, "lv"), self())
	cancel()
	if b.lv != nil {
		defer func() {
			for _, e := range b.lv.stop(context.WithoutCancel(ctx)) {
				b.cleanupErr(e)
			}
			b.cleanupErr(b.checkNothingLeft())
		}()
	}
	if err != nil {
		return err
	}
	b.libvirt = &libvirtMode{s: b.lv, dir: filepath.Join(b.dir, "lvvm")}
	if err := mkdirNobody(b.libvirt.dir); err != nil {
		return err
	}
	b.res.Machine = readMachine(b.lv.version)
	b.res.Date = b.start.UTC().Format(time.RFC3339)
	b.res.Commands = []string{"make bench", "hack/bench.sh", "sidebyside run " + strings.Join(os.Args[2:], " ")}
	b.res.Guest = GuestInfo{Kernel: "test/assets/guest: Debian cloud kernel (vmlinuz)", Initrd: "busybox + qemu-ga initramfs.gz",
		Cmdline: b.files.Cmdline, VCPUs: b.files.VCPUs, MemoryMiB: b.files.MemoryMiB, TCGCacheMiB: b.files.TCGCacheMiB, Machine: b.files.Machine}
	b.progress("setup", -1, "libvirt %s, %s; %d rounds", b.lv.version, b.res.Machine.QEMU, b.rounds)
	if err := b.compareArgv(ctx); err != nil {
		return err
	}
	for _, p := range phases {
		var err error
		t0 := time.Now()
		switch strings.TrimSpace(p) {
		case "start":
			err = b.phaseStart(ctx)
		case "pause":
			err = b.phasePause(ctx)
		case "memory":
			err = b.phaseMemory(ctx)
		case "migrate":
			err = b.phaseMigrate(ctx)
		default:
			err = fmt.Errorf("unknown phase %q", p)
		}
		if err != nil {
			return fmt.Errorf("phase %s: %w", p, err)
		}
		b.progress(p, -1, "done in %.0f s", time.Since(t0).Seconds())
	}
	b.res.Notes = notes
	return nil
}

// setupFiles builds (or finds cached) the test guest and copies it and the launcher binary
// into the work folder, readable by nobody.
func (b *bench) setupFiles(ctx context.Context, launcherBin string) error {
	bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(bctx, "bash", "test/assets/guest/build.sh").Output()
	if err != nil {
		return fmt.Errorf("build test guest (run from the repo root): %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	src := lines[len(lines)-1]
	guestDir, binDir := filepath.Join(b.dir, "guest"), filepath.Join(b.dir, "bin")
	for _, d := range []string{guestDir, binDir} {
		if err := mkdirNobody(d); err != nil {
			return err
		}
	}
	for from, to := range map[string]string{
		filepath.Join(src, "vmlinuz"):      filepath.Join(guestDir, "vmlinuz"),
		filepath.Join(src, "initramfs.gz"): filepath.Join(guestDir, "initramfs.gz"),
		launcherBin:                        filepath.Join(binDir, "vmlet-launcher"),
	} {
		if err := copyFile(from, to); err != nil {
			return err
		}
	}
	b.files = Guest{
		Kernel: filepath.Join(guestDir, "vmlinuz"), Initrd: filepath.Join(guestDir, "initramfs.gz"),
		Cmdline: cmdline(), VCPUs: 1, MemoryMiB: 256, TCGCacheMiB: 32, Machine: "q35",
	}
	return nil
}

// guest is the template with a name.
func (b *bench) guest(name string) Guest {
	g := b.files
	g.Name = name
	return g
}

func (b *bench) progress(phase string, round int, format string, args ...any) {
	r := ""
	if round >= 0 {
		r = fmt.Sprintf(" round %2d/%d", round+1, b.rounds)
	}
	fmt.Fprintf(os.Stderr, "[%6.0fs] %-7s%s: %s\n", time.Since(b.start).Seconds(), phase, r, fmt.Sprintf(format, args...))
}

func (b *bench) cleanupErr(err error) {
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		b.errs = append(b.errs, err)
	}
}

// checkNothingLeft fails if a QEMU of this run still exists after teardown.
func (b *bench) checkNothingLeft() error {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("list /proc: %w", err)
	}
	for _, e := range ents {
		cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cl), "guest=sbs-") && strings.Contains(string(cl), b.dir) {
			return fmt.Errorf("check teardown: pid %s of this run still runs: %s", e.Name(), strings.ReplaceAll(string(cl), "\x00", " "))
		}
	}
	return nil
}

func self() string {
	p, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return p
}

// chownNobody gives path to nobody with mode.
func chownNobody(path string, mode os.FileMode) error {
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	if err := os.Chown(path, nobody, nobody); err != nil {
		return fmt.Errorf("chown %s: %w", path, err)
	}
	return nil
}

// copyFile copies from to to (0755 for executables, 0644 otherwise), owned by nobody.
func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("copy file: %w", err)
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return fmt.Errorf("copy file: %w", err)
	}
	mode := os.FileMode(0o644)
	if st.Mode()&0o111 != 0 {
		mode = 0o755
	}
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("copy file: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy file %s: %w", from, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copy file %s: %w", to, err)
	}
	return chownNobody(to, mode)
}

// readGoBench parses every *.txt in dir (hack/bench.sh writes one per package).
func readGoBench(dir string) []GoBenchmark {
	files, _ := filepath.Glob(filepath.Join(dir, "*.txt"))
	var out []GoBenchmark
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		out = append(out, ParseGoBench(fh, "")...)
		fh.Close()
	}
	return out
}

// notes are the caveats written with every result.
var notes = []string{
	"Every QEMU (all modes) runs as nobody under TCG (KVM is not usable on these machines): " +
		"libvirt in session mode as nobody is KubeVirt's non-root virt-launcher shape (virtqemud there; Debian 12's libvirt 9.0 only has the monolithic libvirtd).",
	"libvirt's qemu.conf is KubeVirt's (stdio via virtlogd, no /dev namespace, no cgroup controllers), user/group dropped (session mode).",
	"libvirt migration is not measured: libvirt refuses to migrate a domain to the same host, and there is one host here.",
	"The reaper (sidebyside reap, a child subreaper above libvirtd) is the harness's, not libvirt's; it is not counted in libvirt's memory.",
}
