package imagebuild

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// imagesTimeout bounds a cold `make images` (Go builds of vmlet, 51 Debian packages).
const imagesTimeout = 20 * time.Minute

var images struct {
	once sync.Once
	dir  string
	err  error
}

// builtImages runs hack/images.sh once per test process (cached across processes, ≈0 s warm)
// and returns the folder holding the archives.
func builtImages(t *testing.T) string {
	t.Helper()
	images.once.Do(func() { images.dir, images.err = runImagesScript() })
	if images.err != nil {
		t.Fatal(images.err)
	}
	return images.dir
}

// runImagesScript runs hack/images.sh with args and returns the folder it prints.
func runImagesScript(args ...string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "hack", "images.sh")
	ctx, cancel := context.WithTimeout(context.Background(), imagesTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/images.sh %v: %w\n%s", args, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return lines[len(lines)-1], nil
}

// imageLine is one line of images.txt.
type imageLine struct {
	File, Ref, Digest        string
	Compressed, Uncompressed int64
}

func readImagesTxt(t *testing.T, dir string) map[string]imageLine {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "images.txt"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]imageLine{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var l imageLine
		if _, err := fmt.Sscan(sc.Text(), &l.File, &l.Ref, &l.Digest, &l.Compressed, &l.Uncompressed); err != nil {
			t.Fatalf("images.txt line %q: %v", sc.Text(), err)
		}
		out[l.Ref] = l
	}
	for _, ref := range []string{PauseRef, VmletRef, LauncherRef} {
		if _, ok := out[ref]; !ok {
			t.Fatalf("images.txt lacks %s:\n%s", ref, b)
		}
	}
	return out
}

// unpackImage extracts the (flattened) file system of the OCI archive at archive into root.
func unpackImage(t *testing.T, archive, root string) {
	t.Helper()
	lay := t.TempDir()
	untar(t, mustOpen(t, archive), lay)
	p, err := layout.FromPath(lay)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 1 {
		t.Fatalf("index of %s: %v (%d manifests, want 1)", archive, err, len(m.Manifests))
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	untar(t, rc, root)
}

func mustOpen(t *testing.T, p string) io.ReadCloser {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// untar writes the folders, files and symlinks of a tar stream into dir, keeping modes and
// owners (the test runs as root).
func untar(t *testing.T, r io.Reader, dir string) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(dst, 0o755)
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600); err == nil {
				_, err = io.Copy(f, tr)
				f.Close()
			}
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, dst)
		default:
			t.Fatalf("%s: unexpected tar entry type %c", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeSymlink {
			if err := os.Chmod(dst, os.FileMode(h.Mode&0o777)|stickyBit(h.Mode)); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(dst, h.Uid, h.Gid); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func stickyBit(mode int64) os.FileMode {
	if mode&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}

// TestLauncherImageBootsGuest boots the test guest with the QEMU of vmlet.dev/vmlet-launcher:dev:
// the image's file system unpacked from its archive, QEMU run in it with chroot as the
// launcher's non-root user (107:107) in a private mount namespace (its own /proc, the test's
// folders bound in, a minimal /dev), through vmlet's qemu package (the argv and QMP device adds
// the launcher uses) with every device vmlet attaches: virtio, SCSI and SATA disks, a virtio NIC
// on a tap owned by 107 in a network namespace of its own, RNG, balloon, VGA + VNC. It proves qemu-files.txt holds all QEMU needs, and that the image's files
// are usable by the launcher's user.
func TestLauncherImageBootsGuest(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t) // the host's qemu-img makes the disk overlay
	dir := builtImages(t)
	root := shortDir(t, "vli")
	if err := os.Chmod(root, 0o755); err != nil { // a container's / is 0755; MkdirTemp's is 0700
		t.Fatal(err)
	}
	unpackImage(t, filepath.Join(dir, "vmlet-launcher.tar"), root)

	work := shortDir(t, "vlw")
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	g := testguest.Assets(t).Dir
	for _, d := range []string{"proc", "dev", work, g} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "dev/net"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, dev := range map[string]uint64{"null": unix.Mkdev(1, 3), "zero": unix.Mkdev(1, 5), "random": unix.Mkdev(1, 8),
		"urandom": unix.Mkdev(1, 9), "net/tun": unix.Mkdev(10, 200)} {
		if err := unix.Mknod(filepath.Join(root, "dev", name), unix.S_IFCHR|0o666, int(dev)); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(root, "dev", name), 0o666); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	// The NIC: a tap owned by 107 in a network namespace of the test's own, as the launcher
	// gets one (a non-root QEMU opens a tap it owns without CAP_NET_ADMIN).
	ns := fmt.Sprintf("vmlet-li-%d", os.Getpid())
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	run(t, "ip", "-n", ns, "tuntap", "add", "dev", "vtap0", "mode", "tap", "user", "107", "group", "107")
	wrapper := filepath.Join(t.TempDir(), "qemu")
	writeScript(t, wrapper, fmt.Sprintf(`exec ip netns exec `+ns+` unshare --mount --propagation private -- /bin/sh -c '
mount -t proc proc %[1]s/proc && mount --bind %[2]s %[1]s%[2]s && mount --bind -o ro %[3]s %[1]s%[3]s &&
exec chroot --userspec=107:107 %[1]s /usr/bin/qemu-system-x86_64 "$@"' qemu "$@"
`, root, work, g))
	checkQEMU := func(vm *qemu.VM) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", vm.Info().PID))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "Uid:") && strings.Fields(l)[1] != "107" {
				t.Errorf("QEMU runs as uid %s, want 107 (the launcher's user)", strings.Fields(l)[1])
			}
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", vm.Info().PID))
		if err != nil || exe != filepath.Join(root, "usr/bin/qemu-system-x86_64") {
			t.Errorf("QEMU's executable is %q (%v), want the image's %s", exe, err, filepath.Join(root, "usr/bin/qemu-system-x86_64"))
		}
		t.Logf("QEMU %s from the image booted the guest (pid %d, uid 107)", vm.Info().Version, vm.Info().PID)
	}
	bootGuest(t, bootOptions{binary: wrapper, dir: work, ready: checkQEMU, owner: 107, full: true, tap: "vtap0"})
}

// TestVmletImageTrustsCAs: the vmlet image holds the system roots where Go looks for them
// (the agent pulls containerDisks over HTTPS), every certificate of the bundle parses, and the
// image's files are owned by root and not writable by others.
func TestVmletImageTrustsCAs(t *testing.T) {
	prereq.Root(t)
	root := t.TempDir()
	unpackImage(t, filepath.Join(builtImages(t), "vmlet.tar"), root)
	b, err := os.ReadFile(filepath.Join(root, CABundlePath))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rest := b; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			t.Errorf("certificate %d of the bundle: %v", n, err)
		}
		n++
	}
	if n < 100 {
		t.Errorf("%s holds %d certificates, want Debian's ≥ 100", CABundlePath, n)
	}
	t.Logf("vmlet image: %d CA certificates", n)
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.Type()&os.ModeSymlink != 0 {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if p != root && (st.Uid != 0 || st.Gid != 0 || (fi.Mode().Perm()&0o002 != 0 && fi.Mode()&os.ModeSticky == 0)) {
			t.Errorf("%s: owner %d:%d mode %v; want root's, not writable by others", strings.TrimPrefix(p, root), st.Uid, st.Gid, fi.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
