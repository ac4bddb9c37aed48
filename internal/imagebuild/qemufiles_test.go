package imagebuild

import (
	"bytes"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/vmlet/vmlet/test/prereq"
)

var update = flag.Bool("update", false, "TestQEMUFiles: rewrite qemu-files.txt with what was measured")

// TestQEMUFiles measures the files the host's QEMU loads while it boots the test guest with
// every device vmlet can attach (kernel boot, virtio/SCSI/SATA disks, a virtio NIC on a tap in
// a fresh network namespace, RNG, balloon, VGA + VNC; SeaBIOS and the option ROMs come with
// them) and the files qemu-img loads for what vmlet runs it for (create, info, convert), all
// under strace; maps each to its Debian package with dpkg -S; and compares with the committed
// qemu-files.txt (-update rewrites it). A file QEMU needs that the list lacks would be missing
// from the launcher image; a listed file QEMU no longer opens makes the image bigger for
// nothing: both fail.
func TestQEMUFiles(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	strace, err := exec.LookPath("strace")
	if err != nil {
		prereq.Missing(t, "strace not on PATH (make deps installs it)")
	}
	dir := shortDir(t, "vqf")

	// QEMU: in its own network namespace with a tap for the NIC, under strace.
	ns := fmt.Sprintf("vmlet-qf-%d", os.Getpid())
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	run(t, "ip", "-n", ns, "tuntap", "add", "dev", "vtap0", "mode", "tap")
	qemuBin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatal(err)
	}
	qemuLog := filepath.Join(dir, "qemu.strace")
	wrapper := filepath.Join(dir, "qemu")
	writeScript(t, wrapper, fmt.Sprintf("exec ip netns exec %s %s -f -qq -e trace=open,openat,execve -e status=successful -o %s %s \"$@\"\n",
		ns, strace, qemuLog, qemuBin))
	bootGuest(t, bootOptions{binary: wrapper, dir: dir, tap: "vtap0", full: true})
	launcher := openedFiles(t, qemuLog)

	// qemu-img as vmlet runs it (storage/qemuimg): create an overlay, info, convert.
	imgLog := filepath.Join(dir, "qemu-img.strace")
	base := filepath.Join(dir, "base.qcow2")
	for i, args := range [][]string{
		{"create", "-f", "qcow2", base, "16M"},
		{"create", "-f", "qcow2", "-F", "qcow2", "-b", base, filepath.Join(dir, "ov.qcow2")},
		{"info", "--output=json", "--force-share", filepath.Join(dir, "ov.qcow2")},
		{"convert", "-O", "raw", base, filepath.Join(dir, "base.raw")},
		{"convert", "-O", "qcow2", filepath.Join(dir, "base.raw"), filepath.Join(dir, "conv.qcow2")},
	} {
		log := fmt.Sprintf("%s.%d", imgLog, i)
		cmd := exec.Command(strace, append([]string{"-f", "-qq", "-e", "trace=open,openat,execve", "-e", "status=successful", "-o", log, "qemu-img"}, args...)...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("qemu-img %v: %v\n%s", args, err, out)
		}
		for p := range openedFiles(t, log) {
			launcher[p] = true
		}
	}
	vmletFiles := map[string]bool{}
	for i := range 5 {
		for p := range openedFiles(t, fmt.Sprintf("%s.%d", imgLog, i)) {
			vmletFiles[p] = true
		}
	}

	var measured []QEMUFile
	for _, l := range []struct {
		image string
		paths map[string]bool
	}{{ListLauncher, launcher}, {ListVmlet, vmletFiles}} {
		owners := owningPackages(t, sortedKeys(l.paths))
		for p, pkg := range owners {
			measured = append(measured, QEMUFile{Image: l.image, Package: pkg, Path: p})
		}
	}
	var got bytes.Buffer
	if err := FormatQEMUFiles(&got, measured); err != nil {
		t.Fatal(err)
	}
	t.Logf("measured %d files (launcher %d, vmlet %d) from %d packages", len(measured), len(launcher), len(vmletFiles), len(Packages(measured)))
	if *update {
		if err := os.WriteFile(QEMUFilesFile, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(QEMUFilesFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("QEMU's files differ from %s (rerun with -update and review):\n%s", QEMUFilesFile, lineDiff(string(want), got.String()))
	}
}

// straceOpen matches a successful open/openat/execve line of strace -f output.
var straceOpen = regexp.MustCompile(`^\d+\s+(?:openat\(AT_FDCWD, |open\(|execve\()"([^"]+)"[^)]*\).*= \d+`)

// openedFiles are the regular files under the system folders (/usr, /lib*, /bin, /sbin) that
// an strace log shows opened or executed. Other paths (the test's own files, /dev, /proc,
// /sys, /etc's loader cache) are the VM's or the kernel's, not the image's.
func openedFiles(t *testing.T, log string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		m := straceOpen.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		p := filepath.Clean(m[1])
		if !strings.HasPrefix(p, "/usr/") && !strings.HasPrefix(p, "/lib") && !strings.HasPrefix(p, "/bin/") && !strings.HasPrefix(p, "/sbin/") {
			continue
		}
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		out[p] = true
		if strings.Contains(line, "execve(") {
			// The kernel maps the program's interpreter (the dynamic loader): no open shows it.
			if interp := elfInterp(t, p); interp != "" {
				out[interp] = true
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no system files opened in %s:\n%s", log, b)
	}
	return out
}

// owningPackages maps each path to the Debian package that ships it and the path as the package
// ships it (dpkg -S; merged /usr means a file opened at /usr/lib/x may be shipped as /lib/x).
func owningPackages(t *testing.T, paths []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range paths {
		found := false
		for _, alias := range []string{p, strings.TrimPrefix(p, "/usr"), UsrPath(p)} {
			b, err := exec.Command("dpkg", "-S", alias).Output()
			if err != nil {
				continue
			}
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				pkg, file, ok := strings.Cut(line, ": ")
				if !ok || file != alias || strings.Contains(pkg, ",") || strings.HasPrefix(line, "diversion") {
					continue
				}
				out[file] = strings.TrimSuffix(pkg, ":amd64")
				found = true
			}
			if found {
				break
			}
		}
		if !found {
			t.Errorf("%s: no Debian package ships it (dpkg -S)", p)
		}
	}
	return out
}

// elfInterp is the ELF interpreter (PT_INTERP) of program, "" for a static one.
func elfInterp(t *testing.T, program string) string {
	t.Helper()
	f, err := elf.Open(program)
	if err != nil {
		return ""
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				t.Fatalf("read %s's interpreter: %v", program, err)
			}
			return filepath.Clean(strings.TrimRight(string(b), "\x00"))
		}
	}
	return ""
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	w, g := map[string]bool{}, map[string]bool{}
	for _, l := range strings.Split(want, "\n") {
		w[l] = true
	}
	for _, l := range strings.Split(got, "\n") {
		g[l] = true
	}
	var d []string
	for l := range w {
		if !g[l] {
			d = append(d, "- "+l)
		}
	}
	for l := range g {
		if !w[l] {
			d = append(d, "+ "+l)
		}
	}
	sort.Strings(d)
	return strings.Join(d, "\n")
}
