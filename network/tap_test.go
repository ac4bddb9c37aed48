package network

import (
	"errors"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenTap: a multiqueue binding's tap opens one queue file per vCPU, each attached to the
// tap in the launcher's netns with vmlet's flags; the tap has carrier while they are open.
// A missing tap is an error and is never created, in the netns or on the host.
func TestOpenTap(t *testing.T) {
	tn := newTestNode(t)
	pod, err := tn.CreatePod("vm-t")
	must(t, err)
	t.Cleanup(func() { must(t, tn.DeletePod("vm-t")) })
	spec := masqSpec("vm-t")
	spec.VCPUs, spec.MultiQueue = 4, true
	a := attach(t, pod, spec)
	if q := a.Plan().Interfaces[0].Queues; q != 4 {
		t.Fatalf("queues = %d, want 4 (one per vCPU)", q)
	}
	files, err := a.OpenTaps("default")
	must(t, err)
	if len(files) != 4 {
		t.Fatalf("got %d queue files, want 4", len(files))
	}
	for i, f := range files {
		ifr, err := unix.NewIfreq("")
		must(t, err)
		if err := unix.IoctlIfreq(int(f.Fd()), unix.TUNGETIFF, ifr); err != nil {
			t.Fatalf("queue %d: TUNGETIFF: %v", i, err)
		}
		if name, flags := ifr.Name(), ifr.Uint16(); name != "tap0" || flags&tapFlags != tapFlags {
			t.Errorf("queue %d: attached to %q with flags %#x, want tap0 with %#x", i, name, flags, tapFlags)
		}
	}
	h, done, err := nsHandle(pod.NetnsPath)
	must(t, err)
	defer done()
	l, err := h.LinkByName("tap0")
	must(t, err)
	if l.Attrs().RawFlags&unix.IFF_LOWER_UP == 0 {
		t.Errorf("tap0 has no carrier with its queues open (flags %#x)", l.Attrs().RawFlags)
	}
	for _, f := range files {
		f.Close()
	}

	before := linkNames(t, pod.NetnsPath)
	if _, err := OpenTap(pod.NetnsPath, "nosuchtap", 1); err == nil {
		t.Fatal("OpenTap of a missing tap succeeded")
	}
	if _, err := OpenTap(pod.NetnsPath, "eth0", 1); !errors.Is(err, ErrNotTap) {
		t.Errorf("OpenTap of a veth = %v, want ErrNotTap", err)
	}
	if _, err := OpenTap(pod.NetnsPath, "tap0", 0); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("OpenTap with 0 queues = %v, want ErrInvalidSpec", err)
	}
	if got := linkNames(t, pod.NetnsPath); !slices.Equal(got, before) {
		t.Errorf("links after failed OpenTaps = %v, want %v", got, before)
	}
}
