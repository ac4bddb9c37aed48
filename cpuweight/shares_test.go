package cpuweight

import "testing"

// The kubelet's table (pkg/kubelet/cm/helpers_linux_test.go TestMilliCPUToShares) plus the
// clamps.
func TestMilliCPUToShares(t *testing.T) {
	for _, c := range []struct {
		milli int64
		want  uint64
	}{
		{0, 2}, {-5, 2}, {1, 2}, {2, 2}, {3, 3}, {100, 102}, {250, 256}, {500, 512},
		{1000, 1024}, {1500, 1536}, {2000, 2048}, {256000, 262144}, {300000, 262144},
		{1 << 62, 262144},
	} {
		if got := MilliCPUToShares(c.milli); got != c.want {
			t.Errorf("MilliCPUToShares(%d) = %d, want %d", c.milli, got, c.want)
		}
	}
}

// runc's ConvertCPUSharesToCgroupV2Value values.
func TestSharesToWeight(t *testing.T) {
	for _, c := range []struct{ shares, want uint64 }{
		{0, 1}, {1, 1}, {2, 1}, {102, 4}, {1024, 39}, {2048, 79}, {262143, 9999}, {262144, 10000},
		{1 << 40, 10000},
	} {
		if got := SharesToWeight(c.shares); got != c.want {
			t.Errorf("SharesToWeight(%d) = %d, want %d", c.shares, got, c.want)
		}
	}
}

func TestPlanVM(t *testing.T) {
	for _, c := range []struct {
		milli int64
		want  Plan
	}{
		{0, Plan{Shares: 2, VCPUShares: 2}},
		{100, Plan{Shares: 102, VCPUShares: 2}}, // one vCPU, no request: CPUPerVCPU 100m
		{400, Plan{Shares: 409, VCPUShares: 2}},
		{2000, Plan{Shares: 2048, VCPUShares: 2}},
	} {
		if got := PlanVM(c.milli); got != c.want {
			t.Errorf("PlanVM(%d) = %+v, want %+v", c.milli, got, c.want)
		}
	}
	if w := SharesToWeight(SystemShares); w != MaxWeight {
		t.Errorf("system weight %d, want %d", w, MaxWeight)
	}
}
