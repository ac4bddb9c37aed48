package launcher

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/qemu/qmp"
)

// qmpBuckets are the upper bounds (seconds) of the QMP latency histograms, Prometheus style
// (+Inf is the count). A query or stop/cont takes 0.3–0.8 ms here under TCG; hotplug tens of
// ms; migrate-incoming, blockdev-add on slow storage or a busy host up to seconds.
var qmpBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// qmpStats are the launcher's QMP counters: a latency histogram per command name and the
// monitor connections lost while the domain was meant to run. Recording is lock-free once a
// command's histogram exists (a sync.Map read and atomic adds); the first use of a name
// creates it under the map's own lock.
type qmpStats struct {
	hists  sync.Map // command name → *qmpHist
	names  atomic.Int64
	losses atomic.Uint64
}

// maxQMPCommands bounds the number of histograms: QEMU has about 250 commands, and a
// qmp-debug.sock user may type any name (QEMU answers CommandNotFound). Names beyond it are
// counted under qmpOtherCommand.
const (
	maxQMPCommands  = 300
	qmpOtherCommand = "(other)"
)

// qmpHist is one command's histogram. counts[i] is the number of replies in bucket i alone
// (not cumulative: one atomic add per reply); counts[len(qmpBuckets)] are those above the
// last bound.
type qmpHist struct {
	counts   []atomic.Uint64
	sumNanos atomic.Uint64
	errors   atomic.Uint64
}

// observe is the qmp.Options.Observe of the launcher's monitor.
func (s *qmpStats) observe(cmd string, took time.Duration, qmpErr *qmp.Error) {
	h, ok := s.hists.Load(cmd)
	if !ok {
		if s.names.Add(1) > maxQMPCommands {
			cmd = qmpOtherCommand
		}
		var loaded bool
		h, loaded = s.hists.LoadOrStore(cmd, &qmpHist{counts: make([]atomic.Uint64, len(qmpBuckets)+1)})
		if loaded {
			s.names.Add(-1) // another caller created it first
		}
	}
	qh := h.(*qmpHist)
	sec := took.Seconds()
	i := sort.SearchFloat64s(qmpBuckets, sec) // first bound >= sec: "at most" the bound
	qh.counts[i].Add(1)
	qh.sumNanos.Add(uint64(max(took, 0)))
	if qmpErr != nil {
		qh.errors.Add(1)
	}
}

// lost counts a monitor connection lost while the domain was meant to run.
func (s *qmpStats) lost() { s.losses.Add(1) }

// snapshot returns the counters, commands sorted by name, buckets cumulative. Each histogram
// is read without stopping writers: its count is the sum of its buckets as read, so count and
// buckets always agree, while the sum may include a reply the buckets do not yet show.
func (s *qmpStats) snapshot() *pb.LauncherStats {
	out := &pb.LauncherStats{QmpConnectionLosses: s.losses.Load()}
	s.hists.Range(func(k, v any) bool {
		h := v.(*qmpHist)
		c := &pb.QMPCommandStats{
			Command:            k.(string),
			UpperBoundsSeconds: append([]float64(nil), qmpBuckets...),
			BucketCounts:       make([]uint64, len(qmpBuckets)),
		}
		var cum uint64
		for i := range h.counts {
			cum += h.counts[i].Load()
			if i < len(qmpBuckets) {
				c.BucketCounts[i] = cum
			}
		}
		c.Count = cum
		c.SumSeconds = float64(h.sumNanos.Load()) / 1e9
		c.Errors = h.errors.Load()
		out.Qmp = append(out.Qmp, c)
		return true
	})
	sort.Slice(out.Qmp, func(i, j int) bool { return out.Qmp[i].Command < out.Qmp[j].Command })
	return out
}

// lostWhileRunning reports whether a monitor connection that ended is a loss: the launcher
// did not stop QEMU itself (no stop intent), the guest did not shut down (no SHUTDOWN event:
// the guest's power-off, a quit and a SIGTERM all send one before QEMU closes the socket) and
// it was not a migration target whose incoming migration had not completed (QEMU exits by
// itself when that fails). What is left: QEMU killed or crashed, or the connection itself
// broke. Pure.
func lostWhileRunning(intent stopIntent, sawShutdown, incomingPending bool) bool {
	return intent == stopNone && !sawShutdown && !incomingPending
}
