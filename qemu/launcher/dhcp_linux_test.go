package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vmlet/vmlet/network/dhcp"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestHandOverDHCP: the DHCP sockets of an interface, bound in a namespace the launcher never
// enters, travel over the hand-over socket with their lease plan; the launcher serves them
// (GetDomain lists the interface), a second hand-over replaces the first, StopDHCP ends it,
// and a wrong number of sockets is refused. Every socket is closed again.
func TestHandOverDHCP(t *testing.T) {
	prereq.Root(t)
	ns, ip := testNetns(t, "vmlet-dh")
	ip("-n", ns, "link", "add", "br0", "type", "bridge")
	ip("-n", ns, "link", "set", "br0", "up")
	nsPath := "/var/run/netns/" + ns

	l := &Launcher{log: slog.New(slog.NewTextHandler(io.Discard, nil)), events: newEventLog()}
	sock := filepath.Join(t.TempDir(), "taps.sock")
	lis, err := listenTaps(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close(); l.dhcp.closeAll() })
	go l.serveTaps(lis)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	plan := dhcp.LeasePlan{
		Name: "default",
		DHCP: dhcp.DHCPConfig{Interface: "br0", ServerAddr: netip.MustParseAddr("10.0.2.1"), ClientMAC: mac,
			ClientAddr: netip.MustParsePrefix("10.0.2.2/24"), LeaseTime: time.Hour},
		DHCP6: &dhcp.DHCPv6Config{Interface: "br0", ServerMAC: mac, ClientMAC: mac,
			ClientAddr: netip.MustParsePrefix("fd10:0:2::2/120"), LeaseTime: time.Hour},
		RA: &dhcp.RAConfig{Interface: "br0", Source: netip.MustParseAddr("fe80::1"), Prefix: netip.MustParsePrefix("fd10:0:2::/120"), RouterLifetime: time.Hour},
	}
	socks, err := dhcp.ListenDHCP(nsPath, &plan)
	if err != nil {
		t.Fatal(err)
	}
	handed := socketInodes(t, socks.Files())
	v4only := plan
	v4only.DHCP6, v4only.RA = nil, nil
	if err := HandOverDHCP(ctx, sock, v4only, socks); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("3 sockets for a DHCPv4-only plan: %v, want ErrInvalidRequest", err)
	}
	for range 2 { // the second replaces the first
		if err := HandOverDHCP(ctx, sock, plan, socks); err != nil {
			t.Fatal(err)
		}
	}
	socks.Close()
	if names, _ := l.dhcp.snapshot(); !slices.Equal(names, []string{"default"}) {
		t.Errorf("served interfaces %v, want [default]", names)
	}
	if err := StopDHCP(ctx, sock, "default"); err != nil {
		t.Fatal(err)
	}
	if err := StopDHCP(ctx, sock, "unknown"); err != nil {
		t.Errorf("stop dhcp of an interface not served: %v", err)
	}
	if names, _ := l.dhcp.snapshot(); len(names) != 0 {
		t.Errorf("served interfaces after StopDHCP: %v", names)
	}
	// Closing a service waits for its server goroutines: once StopDHCP (and the replacing and
	// the refused hand-overs) returned, no copy of a handed-over socket is open anywhere in
	// this process (the launcher's copies included).
	for fd, ino := range openSockets(t) {
		if slices.Contains(handed, ino) {
			t.Errorf("fd %s still holds handed-over socket %s after StopDHCP", fd, ino)
		}
	}
}

// socketInodes names the sockets files are ("socket:[inode]", as /proc/self/fd links them).
func socketInodes(t *testing.T, files []*os.File) []string {
	t.Helper()
	var out []string
	for _, f := range files {
		l, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// openSockets maps this process's open fds to what they link to.
func openSockets(t *testing.T) map[string]string {
	t.Helper()
	des, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, de := range des {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", de.Name())); err == nil {
			out[de.Name()] = l
		}
	}
	return out
}
