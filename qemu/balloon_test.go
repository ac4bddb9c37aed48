package qemu

import (
	"reflect"
	"testing"
	"time"
)

func TestParseGuestStats(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	tests := []struct {
		name string
		in   string
		want BalloonInfo
	}{
		{"before the first report", `{"stats": {"stat-swap-in": -1, "stat-free-memory": -1, "stat-total-memory": -1},
			"last-update": 0}`, BalloonInfo{}},
		{"uint64 max means not reported too", `{"stats": {"stat-free-memory": 18446744073709551615,
			"stat-total-memory": 228519936}, "last-update": 1764600000}`,
			BalloonInfo{StatsUpdated: time.Unix(1764600000, 0), Total: u(228519936)}},
		{"a full report", `{"stats": {"stat-swap-in": 0, "stat-swap-out": 4096, "stat-major-faults": 12,
			"stat-minor-faults": 3400, "stat-free-memory": 150000000, "stat-total-memory": 228519936,
			"stat-available-memory": 180000000, "stat-disk-caches": 1000000, "stat-htlb-pgalloc": 0,
			"stat-htlb-pgfail": -1}, "last-update": 1764600010}`,
			BalloonInfo{StatsUpdated: time.Unix(1764600010, 0), SwapIn: u(0), SwapOut: u(4096), MajorFaults: u(12),
				MinorFaults: u(3400), Free: u(150000000), Total: u(228519936), Available: u(180000000), Caches: u(1000000)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseGuestStats([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
	for _, bad := range []string{`{"stats": {"stat-free-memory": 1.5}}`, `{"stats": {"stat-free-memory": -2}}`, `[]`} {
		if _, err := ParseGuestStats([]byte(bad)); err == nil {
			t.Errorf("ParseGuestStats(%s): no error", bad)
		}
	}
}
