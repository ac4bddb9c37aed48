package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"github.com/vmlet/vmlet/qemu/qmp"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestNICHotplug: a NIC backed by a tap fd (created in a network namespace of the test's own,
// passed over SCM_RIGHTS) appears in the guest with its MAC, the guest's DHCP requests reach
// the tap, and unplug removes it.
func TestNICHotplug(t *testing.T) {
	prereq.Root(t)
	taps, ns := tapInNewNetns(t, "vmtap0", 1)
	tap := taps[0]
	// Two vCPUs: the guest uses min(queues, cpus) queue pairs.
	vm := startGuest(t, guestSpec(t, guestOpts{hotplugPorts: 2, mutate: func(s *Spec) { s.CPU.Cores = 2 }}))
	vm.waitReady(t)
	ctx := ctxT(t, opTimeout)

	const mac = "52:54:00:ab:cd:01"
	from := vm.console.Len()
	if err := vm.AddNIC(ctx, NIC{ID: "net1", MAC: mac, TapFDs: []*os.File{tap}}); err != nil {
		t.Fatal(err)
	}
	if _, err := vm.console.WaitFrom(ctx, from, testguest.MarkerNICAdded+" eth0"); err != nil {
		t.Fatal(err)
	}
	if got := vm.sh(t, "cat /sys/class/net/eth0/address"); got != mac {
		t.Fatalf("guest eth0 has MAC %q, want %q", got, mac)
	}
	// The guest's udhcpc broadcasts DISCOVERs: they arrive on the tap as received packets.
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	waitCond(t, "guest packets on the tap", func() bool {
		l, err := h.LinkByName("vmtap0")
		return err == nil && l.Attrs().Statistics != nil && l.Attrs().Statistics.RxPackets > 0
	})
	if err := vm.AddNIC(ctx, NIC{ID: "net1", MAC: mac, TapFDs: []*os.File{tap}}); !errors.Is(err, ErrDeviceExists) {
		t.Errorf("duplicate AddNIC = %v, want ErrDeviceExists", err)
	}

	// A multiqueue tap: one fd per queue, passed together (netdev_add fds=a:b).
	mq, _ := tapInNewNetns(t, "vmtap1", 2)
	from = vm.console.Len()
	if err := vm.AddNIC(ctx, NIC{ID: "net2", MAC: "52:54:00:ab:cd:02", TapFDs: mq}); err != nil {
		t.Fatal(err)
	}
	line, _, err := vm.console.WaitLine(ctx, from, testguest.MarkerNICAdded+" eth")
	if err != nil {
		t.Fatal(err)
	}
	eth := strings.TrimSpace(strings.TrimPrefix(line[strings.Index(line, testguest.MarkerNICAdded):], testguest.MarkerNICAdded))
	if got := vm.sh(t, "ls /sys/class/net/"+eth+"/queues | grep -c rx-"); got != "2" {
		t.Errorf("guest %s has %s rx queues, want 2", eth, got)
	}

	from = vm.console.Len()
	if err := vm.RemoveNIC(ctx, "net1"); err != nil {
		t.Fatal(err)
	}
	if _, err := vm.console.WaitFrom(ctx, from, testguest.MarkerNICRemoved+" eth0"); err != nil {
		t.Fatal(err)
	}
	// QEMU 7.2 has no query-netdev: a second netdev_del must find nothing.
	var qe *qmp.Error
	if err := vm.Monitor().Execute(ctx, "netdev_del", map[string]any{"id": netdevID("net1")}, nil); !errors.As(err, &qe) {
		t.Errorf("netdev_del after RemoveNIC = %v, want a QMP error (netdev gone)", err)
	}
	if n := vm.NICs(); len(n) != 1 || n[0].ID != "net2" {
		t.Errorf("NICs() = %+v after unplugging net1, want only net2", n)
	}
}

// TestNICUnplugPending: a guest that does not release an unplugged NIC in time (its vCPUs are
// stopped) leaves the request pending: RemoveNIC says ErrUnplugPending, and so does a second
// call (it does not ask QEMU again). Once the guest runs again, a call waiting for it completes
// the unplug (net1), and one made after the guest released the device, while nobody listened
// for QEMU's event, finds it gone and completes too (net2: asking QEMU again there fails with
// DeviceNotFound, and the unplug never completed); each NIC's netdev is deleted.
func TestNICUnplugPending(t *testing.T) {
	prereq.Root(t)
	tap1, _ := tapInNewNetns(t, "vmtap0", 1)
	tap2, _ := tapInNewNetns(t, "vmtap1", 1)
	vm := startGuest(t, guestSpec(t, guestOpts{hotplugPorts: 2}))
	vm.waitReady(t)
	ctx := ctxT(t, opTimeout)
	for i, f := range []*os.File{tap1[0], tap2[0]} {
		from := vm.console.Len()
		if err := vm.AddNIC(ctx, NIC{ID: fmt.Sprintf("net%d", i+1), MAC: fmt.Sprintf("52:54:00:ab:cd:1%d", i+1), TapFDs: []*os.File{f}}); err != nil {
			t.Fatal(err)
		}
		if _, err := vm.console.WaitFrom(ctx, from, testguest.MarkerNICAdded); err != nil {
			t.Fatal(err)
		}
	}
	if err := vm.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"net1", "net2"} {
		for try := range 2 {
			short, cancel := context.WithTimeout(ctx, time.Second)
			err := vm.RemoveNIC(short, id)
			cancel()
			if !errors.Is(err, ErrUnplugPending) {
				t.Fatalf("RemoveNIC(%s) #%d with the guest stopped = %v, want ErrUnplugPending", id, try+1, err)
			}
		}
	}
	if err := vm.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if err := vm.RemoveNIC(ctx, "net1"); err != nil {
		t.Fatalf("RemoveNIC(net1) once the guest runs: %v", err)
	}
	waitCond(t, "the guest released net2", func() bool {
		gone, err := vm.peripheralGone(ctx, "net2")
		return err == nil && gone
	})
	if err := vm.RemoveNIC(ctx, "net2"); err != nil {
		t.Fatalf("RemoveNIC(net2) after the guest released it: %v", err)
	}
	var qe *qmp.Error
	for _, id := range []string{"net1", "net2"} {
		if err := vm.Monitor().Execute(ctx, "netdev_del", map[string]any{"id": netdevID(id)}, nil); !errors.As(err, &qe) {
			t.Errorf("netdev_del %s after RemoveNIC = %v, want a QMP error (netdev gone)", id, err)
		}
	}
	if n := vm.NICs(); len(n) != 0 {
		t.Errorf("NICs() = %+v after both unplugs", n)
	}
}

// tapInNewNetns creates a network namespace and in it a multiqueue tap named name with queues
// queues, up, and returns its queue fds and the namespace. Both are closed by t.Cleanup, which makes the
// namespace and the tap disappear. NOTES: a tap lands in the namespace of the thread that
// opens /dev/net/tun, so this runs on a locked thread switched into the new namespace; the
// thread is never unlocked, so Go discards it instead of reusing it elsewhere.
func tapInNewNetns(t testing.TB, name string, queues int) ([]*os.File, netns.NsHandle) {
	t.Helper()
	type result struct {
		tap []*os.File
		ns  netns.NsHandle
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := netns.New()
		if err != nil {
			ch <- result{err: err}
			return
		}
		link := &netlink.Tuntap{
			LinkAttrs:  netlink.LinkAttrs{Name: name},
			Mode:       netlink.TUNTAP_MODE_TAP,
			Queues:     queues,
			Flags:      netlink.TUNTAP_MULTI_QUEUE_DEFAULTS | netlink.TUNTAP_VNET_HDR,
			NonPersist: true,
		}
		if err := netlink.LinkAdd(link); err != nil {
			ns.Close()
			ch <- result{err: err}
			return
		}
		if err := netlink.LinkSetUp(link); err != nil {
			for _, f := range link.Fds {
				f.Close()
			}
			ns.Close()
			ch <- result{err: err}
			return
		}
		ch <- result{tap: link.Fds, ns: ns}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("create tap in a new netns: %v", r.err)
	}
	t.Cleanup(func() {
		for _, f := range r.tap {
			f.Close()
		}
		r.ns.Close()
	})
	return r.tap, r.ns
}

// waitCond polls cond (a cheap, local query) until it holds, failing after opTimeout. For
// state that has no event to wait on, such as interface counters.
func waitCond(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(opTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}
