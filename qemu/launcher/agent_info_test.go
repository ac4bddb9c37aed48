package launcher

import (
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/qemu/qga/qgatest"
)

// TestPollInfo (fake clock, scripted agent): the round the liveness poller runs when the agent
// connects, then one every agentInfoInterval; only a changed answer is stored and emits an
// agent event (so an unchanged guest costs the node agent nothing); guest-info is asked at
// connect only (its interval is 300 s); a kick (NIC hotplug) polls at once; nothing is
// polled while the agent is down.
func TestPollInfo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeGuest(t)
		var mu sync.Mutex
		ifs := []map[string]any{{"name": "lo"}}
		versions := 0
		f.Handle("guest-network-get-interfaces", func(json.RawMessage) (any, *qgatest.Error) {
			mu.Lock()
			defer mu.Unlock()
			return ifs, nil
		})
		l := &Launcher{log: slog.New(slog.DiscardHandler), events: newEventLog()}
		d := &domain{l: l, agentUp: true}
		a := f.poller(t, nil)
		a.d, a.infoKick = d, make(chan struct{}, 1)
		f.Handle("guest-info", func(json.RawMessage) (any, *qgatest.Error) {
			mu.Lock()
			versions++
			mu.Unlock()
			return map[string]any{"version": "7.2.22", "supported_commands": []map[string]any{
				{"name": "guest-get-osinfo", "enabled": true}, {"name": "guest-get-host-name", "enabled": true},
				{"name": "guest-network-get-interfaces", "enabled": true}}}, nil
		})
		done := make(chan struct{})
		go func() { defer close(done); a.pollInfo() }()
		defer func() { a.close(); <-done }()
		changes := func() int {
			w, err := l.events.since(0)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, e := range w.items {
				if e.GetAgent().GetGuestInfoChanged() {
					n++
				}
			}
			return n
		}
		stored := func() *pb.GuestInfoResponse {
			d.mu.Lock()
			defer d.mu.Unlock()
			return d.guestInfo
		}

		a.infoRound() // what the liveness poller does when the agent connects
		if g := stored(); changes() != 1 || g.GetOs().GetId() != "debian" || g.GetHostname() != "vmlet-guest" || len(g.GetInterfaces()) != 1 {
			t.Fatalf("after connect: %d change events, stored %v", changes(), g)
		}
		time.Sleep(agentInfoInterval) // the fake clock: one more round, the same answer
		synctest.Wait()
		if changes() != 1 {
			t.Errorf("an unchanged answer emitted an event (%d)", changes())
		}
		mu.Lock()
		ifs = append(ifs, map[string]any{"name": "eth0", "hardware-address": "52:54:00:00:00:01"})
		mu.Unlock()
		time.Sleep(agentInfoInterval)
		synctest.Wait()
		if g := stored(); changes() != 2 || len(g.GetInterfaces()) != 2 {
			t.Errorf("after a new interface: %d change events, stored %v", changes(), g)
		}
		mu.Lock()
		ifs = ifs[:1]
		mu.Unlock()
		a.kickInfo() // a NIC unplugged: a round at once, not at the next tick
		synctest.Wait()
		if g := stored(); changes() != 3 || len(g.GetInterfaces()) != 1 {
			t.Errorf("after a kick: %d change events, stored %v", changes(), g)
		}
		mu.Lock()
		ifs = append(ifs, map[string]any{"name": "eth0", "hardware-address": "52:54:00:00:00:01"})
		mu.Unlock()
		a.kickInfo()
		synctest.Wait()
		mu.Lock()
		if versions != 1 {
			t.Errorf("guest-info asked %d times in 20 s, want once (300 s interval)", versions)
		}
		mu.Unlock()

		a.mu.Lock()
		a.up = false // the agent went away: no round until it connects again
		a.mu.Unlock()
		mu.Lock()
		ifs = ifs[:1]
		mu.Unlock()
		time.Sleep(3 * agentInfoInterval)
		synctest.Wait()
		if g := stored(); changes() != 4 || len(g.GetInterfaces()) != 2 {
			t.Errorf("polled while the agent was down: %d change events, stored %v", changes(), g)
		}
	})
}
