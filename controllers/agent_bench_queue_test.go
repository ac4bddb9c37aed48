package controllers_test

import (
	"testing"

	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// queueStats are the node agent's reconciles so far, from controller-runtime's metrics: their
// total time and number, and the total time VMI keys waited in its queue and how many waited.
// Differences between two readings say where a phase of a benchmark spent its time.
type queueStats struct {
	work, wait   float64 // seconds
	works, waits uint64
}

// readQueueStats reads them for the controller named vmi-node (every agent of the process).
func readQueueStats(tb testing.TB) queueStats {
	tb.Helper()
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var s queueStats
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			ours := false
			for _, l := range m.GetLabel() {
				if (l.GetName() == "controller" || l.GetName() == "name") && l.GetValue() == "vmi-node" {
					ours = true
				}
			}
			if !ours || m.GetHistogram() == nil {
				continue
			}
			h := m.GetHistogram()
			switch mf.GetName() {
			case "controller_runtime_reconcile_time_seconds":
				s.work, s.works = s.work+h.GetSampleSum(), s.works+h.GetSampleCount()
			case "workqueue_queue_duration_seconds":
				s.wait, s.waits = s.wait+h.GetSampleSum(), s.waits+h.GetSampleCount()
			}
		}
	}
	return s
}

// since is s less an earlier reading: (mean reconcile ms, reconciles, mean queue wait ms).
func (s queueStats) since(before queueStats) (workMs float64, works uint64, waitMs float64) {
	works, waits := s.works-before.works, s.waits-before.waits
	if works > 0 {
		workMs = (s.work - before.work) / float64(works) * 1000
	}
	if waits > 0 {
		waitMs = (s.wait - before.wait) / float64(waits) * 1000
	}
	return workMs, works, waitMs
}
