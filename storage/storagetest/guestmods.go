package storagetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// GuestModuleDir is where GuestModules puts the modules in the guest.
const GuestModuleDir = "/lib/modules/vmlet-extra"

// GuestModules returns a gzipped newc cpio archive with the named modules of the test guest's
// own kernel (e.g. "cdrom", "isofs") at GuestModuleDir/<name>.ko, to append to the guest's
// initramfs (the kernel unpacks concatenated archives) and insmod in the guest. The modules
// come from the exact Debian kernel package the guest was built from (manifest.txt), fetched
// with apt-get download once and cached in $VMLET_CACHE/guest-modules.
//
// This exists because the test guest (test/assets/guest) loads no filesystem modules; adding
// them to its modules.txt would make it unnecessary.
func GuestModules(tb testing.TB, guest testguest.Files, modules ...string) string {
	tb.Helper()
	kver, pkg, ver, err := guestKernel(guest.Dir)
	if err != nil {
		tb.Fatalf("guest modules: %v", err)
	}
	cache := filepath.Join(cacheDir(), "guest-modules")
	out := filepath.Join(cache, fmt.Sprintf("%s_%s_%s.cpio.gz", kver, ver, strings.Join(modules, "+")))
	if _, err := os.Stat(out); err == nil {
		return out
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		prereq.Missing(tb, "apt-get not on PATH (guest modules come from the Debian kernel package)")
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		tb.Fatal(err)
	}
	tmp := tb.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := []string{"-qq", "download", pkg + "=" + ver}
	if os.Geteuid() == 0 {
		args = append([]string{"-o", "APT::Sandbox::User=root"}, args...)
	}
	cmd := exec.CommandContext(ctx, "apt-get", args...)
	cmd.Dir = tmp
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("apt-get download %s=%s: %v: %s", pkg, ver, err, b)
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		tb.Fatalf("apt-get download %s=%s left %v", pkg, ver, debs)
	}
	kos, err := extractModules(ctx, debs[0], kver, modules)
	if err != nil {
		tb.Fatalf("guest modules: %v", err)
	}
	archive, err := newcArchive(kos, modules)
	if err != nil {
		tb.Fatalf("guest modules: %v", err)
	}
	part := out + fmt.Sprintf(".%d.tmp", os.Getpid())
	if err := os.WriteFile(part, archive, 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(part, out); err != nil {
		tb.Fatal(err)
	}
	return out
}

// ExtendInitrd writes initrd followed by the extra archives to a new file in tb.TempDir().
func ExtendInitrd(tb testing.TB, initrd string, extra ...string) string {
	tb.Helper()
	var buf bytes.Buffer
	for _, p := range append([]string{initrd}, extra...) {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		buf.Write(b)
	}
	out := filepath.Join(tb.TempDir(), "initrd.img")
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		tb.Fatal(err)
	}
	return out
}

// guestKernel reads the kernel release and its package (name, version) from the guest manifest.
func guestKernel(dir string) (kver, pkg, ver string, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "manifest.txt"))
	if err != nil {
		return "", "", "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "kernel":
			kver = f[1]
		case len(f) == 2 && strings.HasPrefix(f[0], "linux-image-"):
			pkg, ver = f[0], f[1]
		}
	}
	if kver == "" || pkg == "" {
		return "", "", "", errors.New("manifest.txt names no kernel package")
	}
	return kver, pkg, ver, nil
}

// extractModules reads name.ko for each module from the package's data tarball.
func extractModules(ctx context.Context, deb, kver string, modules []string) (map[string][]byte, error) {
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run dpkg-deb: %w", err)
	}
	want := map[string]bool{}
	for _, m := range modules {
		want[m+".ko"] = true
	}
	kos := map[string][]byte{}
	tr := tar.NewReader(out)
	prefix := "lib/modules/" + kver + "/kernel/"
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", deb, err)
		}
		name := strings.TrimPrefix(hdr.Name, "./")
		if strings.HasPrefix(name, prefix) && want[path.Base(name)] {
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, err
			}
			kos[strings.TrimSuffix(path.Base(name), ".ko")] = b
		}
	}
	_, _ = io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("run dpkg-deb: %w", err)
	}
	for _, m := range modules {
		if kos[m] == nil {
			return nil, fmt.Errorf("module %s.ko not in %s (compressed or built in?)", m, deb)
		}
	}
	return kos, nil
}

// newcArchive is a gzipped newc cpio of GuestModuleDir and the modules.
func newcArchive(kos map[string][]byte, order []string) ([]byte, error) {
	var raw bytes.Buffer
	ino := 1
	entry := func(name string, mode uint32, data []byte) {
		fmt.Fprintf(&raw, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
			ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
		ino++
		raw.WriteString(name)
		raw.WriteByte(0)
		pad(&raw)
		raw.Write(data)
		pad(&raw)
	}
	dir := strings.TrimPrefix(GuestModuleDir, "/")
	for _, d := range []string{"lib", "lib/modules", dir} {
		entry(d, 0o40755, nil)
	}
	for _, m := range order {
		entry(dir+"/"+m+".ko", 0o100644, kos[m])
	}
	entry("TRAILER!!!", 0, nil)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return gz.Bytes(), nil
}

func pad(b *bytes.Buffer) {
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
}

func cacheDir() string {
	if d := os.Getenv("VMLET_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "vmlet")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "vmlet-cache")
	}
	return filepath.Join(home, ".cache", "vmlet")
}
