package launcher_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestDisplay: a domain with graphics, run by a launcher as nobody, has a VGA device at
// 00:01.0 and a VNC server on sockets/vnc.sock (0600, owned by the launcher's user, no TCP
// listener): an RFB client completes the handshake, a second one takes the display over and
// the first is disconnected; Screenshot returns a PNG of the guest's text console (the test
// writes to tty1 through the guest agent first) whose pixels are not uniform. The same guest
// without graphics has no VGA device, no vnc.sock, and Screenshot fails with ErrNoDisplay.
func TestDisplay(t *testing.T) {
	prereq.Root(t) // to hand the files to nobody
	t.Run("graphics", func(t *testing.T) {
		p, spec := nobodyLauncher(t, "display")
		spec.Graphics = true
		bootDisplay(t, p, spec)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()

		if addr, ok := pciVGA(t, ctx, p); !ok || addr != (qemu.PCIAddr{Bus: 0, Slot: 1}) {
			t.Errorf("VGA device at %+v (found %v), want 00:01.0", addr, ok)
		}
		sock := p.paths.VNCSocket()
		st, err := os.Lstat(sock)
		if err != nil {
			t.Fatal(err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 || sys.Uid != nobody {
			t.Errorf("vnc.sock: mode %v uid %d, want a 0600 socket owned by %d", st.Mode(), sys.Uid, nobody)
		}
		if tcp := qemuTCPListeners(t, p.qemu); tcp != 0 {
			t.Errorf("qemu has %d TCP sockets, want none (-vnc none)", tcp)
		}

		first, w, h := rfbHandshake(t, sock)
		if w <= 0 || h <= 0 {
			t.Errorf("RFB ServerInit size %dx%d", w, h)
		}
		second, _, _ := rfbHandshake(t, sock)
		defer second.Close()
		_ = first.SetReadDeadline(time.Now().Add(30 * time.Second))
		if n, err := io.Copy(io.Discard, first); err != nil {
			t.Errorf("first VNC client after the second connected: read %d bytes, then %v; want EOF (taken over)", n, err)
		}
		first.Close()

		// Text on the display, then a screenshot of it: GuestExec returns once the write to
		// the VGA console is done.
		r, err := p.client.GuestExec(ctx, "/bin/sh", []string{"-c", "clear >/dev/tty1; cat /etc/os-release >/dev/tty1"}, nil, 0)
		if err != nil || r.GetExitCode() != 0 {
			t.Fatalf("write to tty1: %v %v %s", r, err, r.GetStderr())
		}
		shot, err := p.client.Screenshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(shot.GetPng()))
		if err != nil {
			t.Fatalf("screenshot is not a PNG: %v", err)
		}
		if b := img.Bounds(); b.Dx() != int(shot.GetWidth()) || b.Dy() != int(shot.GetHeight()) || b.Dx() < 320 {
			t.Errorf("screenshot %v, response says %dx%d", b, shot.GetWidth(), shot.GetHeight())
		}
		if colors := distinctColors(img); colors < 2 {
			t.Errorf("screenshot has %d distinct colors: uniform, the guest's text is not on it", colors)
		}
		if left, _ := filepath.Glob(filepath.Join(p.runDir, "screendump-*")); len(left) > 0 {
			t.Errorf("screendump files left behind: %v", left)
		}
		stopDisplay(t, ctx, p)
	})
	t.Run("no-graphics", func(t *testing.T) {
		p, spec := nobodyLauncher(t, "nodisplay")
		bootDisplay(t, p, spec)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if addr, ok := pciVGA(t, ctx, p); ok {
			t.Errorf("VGA device at %+v without graphics", addr)
		}
		if _, err := os.Lstat(p.paths.VNCSocket()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("vnc.sock without graphics: %v", err)
		}
		var re *launcher.RemoteError
		if _, err := p.client.Screenshot(ctx); !errors.Is(err, launcher.ErrNoDisplay) || !errors.As(err, &re) || re.Code != "FailedPrecondition" {
			t.Errorf("screenshot without graphics: %v, want ErrNoDisplay (FailedPrecondition)", err)
		}
		stopDisplay(t, ctx, p)
	})
}

// nobodyLauncher starts a launcher as nobody on a run dir owned by nobody, with the test
// guest's boot files copied there (as TestUnprivilegedLauncher does).
func nobodyLauncher(t *testing.T, name string) (*proc, *pb.DomainSpec) {
	t.Helper()
	runDir, err := os.MkdirTemp("", "vl-")
	if err != nil {
		t.Fatal(err)
	}
	files := testguest.Assets(t)
	spec := guestSpec(t, name)
	spec.Boot.Kernel = copyFile(t, files.Kernel, filepath.Join(runDir, "vmlinuz"))
	spec.Boot.Initrd = copyFile(t, files.Initrd, filepath.Join(runDir, "initrd"))
	if err := os.Chown(runDir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	return startLauncher(t, launchOpts{uid: nobody, runDir: runDir}), spec
}

// bootDisplay syncs spec and waits for the guest's READY marker and its agent.
func bootDisplay(t *testing.T, p *proc, spec *pb.DomainSpec) {
	t.Helper()
	rec := watch(t, p.client, 0)
	t0 := time.Now()
	_, con := syncGuest(t, p, spec)
	ctx, cancel := context.WithTimeout(context.Background(), bootDeadline)
	defer cancel()
	if err := con.Wait(ctx, testguest.MarkerReady); err != nil {
		t.Fatal(err)
	}
	t.Logf("graphics=%v: sync to READY in %s", spec.GetGraphics(), time.Since(t0).Round(time.Millisecond))
	if _, err := rec.waitEvent(ctx, 0, "agent connected", isAgent(true)); err != nil {
		t.Fatal(err)
	}
}

func stopDisplay(t *testing.T, ctx context.Context, p *proc) {
	t.Helper()
	if err := p.client.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if code, err := p.wait(ctx); err != nil || code != launcher.ExitForced {
		t.Errorf("exit %d %v", code, err)
	}
	p.assertClean(t)
}

// pciVGA finds the display device (id video_0) in query-pci.
func pciVGA(t *testing.T, ctx context.Context, p *proc) (qemu.PCIAddr, bool) {
	t.Helper()
	devs, err := p.client.PCIDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for a, id := range devs {
		if id == "video_0" {
			return a, true
		}
	}
	return qemu.PCIAddr{}, false
}

// qemuTCPListeners counts QEMU's TCP sockets (inodes of its fds found in /proc/net/tcp{,6}).
func qemuTCPListeners(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	re := regexp.MustCompile(`^socket:\[(\d+)\]$`)
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if m := re.FindStringSubmatch(l); err == nil && m != nil {
			inodes[m[1]] = true
		}
	}
	n := 0
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(b, []byte("\n"))[1:] {
			if fields := bytes.Fields(line); len(fields) > 9 && inodes[string(fields[9])] {
				n++
			}
		}
	}
	return n
}

// rfbHandshake connects to a VNC unix socket and runs RFB 3.8 up to ServerInit (RFC 6143
// §7.1–7.3): version exchange, security types (None must be offered: the socket is the
// access control), SecurityResult OK, ClientInit shared, ServerInit's framebuffer size.
func rfbHandshake(t *testing.T, sock string) (net.Conn, int, int) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	fail := func(format string, a ...any) {
		c.Close()
		t.Fatalf("rfb: "+format, a...)
	}
	version := make([]byte, 12)
	if _, err := io.ReadFull(c, version); err != nil {
		fail("read version: %v", err)
	}
	if !regexp.MustCompile(`^RFB 003\.00[378]\n$`).Match(version) {
		fail("server version %q", version)
	}
	if _, err := c.Write([]byte("RFB 003.008\n")); err != nil {
		fail("write version: %v", err)
	}
	var n [1]byte
	if _, err := io.ReadFull(c, n[:]); err != nil || n[0] == 0 {
		fail("security types: n=%d %v", n[0], err)
	}
	types := make([]byte, n[0])
	if _, err := io.ReadFull(c, types); err != nil {
		fail("security types: %v", err)
	}
	if !bytes.Contains(types, []byte{1}) {
		fail("security types %v lack None (1)", types)
	}
	if _, err := c.Write([]byte{1}); err != nil {
		fail("choose None: %v", err)
	}
	var result uint32
	if err := binary.Read(c, binary.BigEndian, &result); err != nil || result != 0 {
		fail("security result %d %v", result, err)
	}
	if _, err := c.Write([]byte{1}); err != nil { // ClientInit: shared
		fail("client init: %v", err)
	}
	var init struct {
		W, H    uint16
		PixFmt  [16]byte
		NameLen uint32
	}
	if err := binary.Read(c, binary.BigEndian, &init); err != nil {
		fail("server init: %v", err)
	}
	if _, err := io.CopyN(io.Discard, c, int64(init.NameLen)); err != nil {
		fail("server init name: %v", err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, int(init.W), int(init.H)
}

// distinctColors counts the colors of img, stopping at 16.
func distinctColors(img image.Image) int {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, bl, a}] = true
			if len(seen) >= 16 {
				return len(seen)
			}
		}
	}
	return len(seen)
}
