package launcher

import (
	"testing"

	"github.com/vmlet/vmlet/test/prereq"
)

// TestOpenTapQueueModes: one queue of a plain tap, and one or several queues of a multiqueue
// tap (package network makes every tap multiqueue, even for one queue).
func TestOpenTapQueueModes(t *testing.T) {
	prereq.Root(t)
	ns, ip := testNetns(t, "vmlet-tq")
	ip("-n", ns, "tuntap", "add", "dev", "plain0", "mode", "tap", "vnet_hdr")
	ip("-n", ns, "tuntap", "add", "dev", "mq0", "mode", "tap", "vnet_hdr", "multi_queue")
	for _, tt := range []struct {
		tap    string
		queues int
	}{{"plain0", 1}, {"mq0", 1}, {"mq0", 3}} {
		files, err := openTap(tapRef{Name: tt.tap, NetNS: "/var/run/netns/" + ns, Queues: tt.queues})
		if err != nil {
			t.Errorf("open %s with %d queues: %v", tt.tap, tt.queues, err)
			continue
		}
		if len(files) != tt.queues {
			t.Errorf("open %s with %d queues: %d files", tt.tap, tt.queues, len(files))
		}
		for _, f := range files {
			f.Close()
		}
	}
}
