package qemu

import "testing"

func TestLiveMigrationLosesWrites(t *testing.T) {
	for _, tc := range []struct {
		accel, version string
		want           bool
	}{
		{"tcg", "7.2.22", true},
		{"tcg", "8.2.2", true},
		{"tcg", "9.0.0", false},
		{"tcg", "10.1.0", false},
		{"tcg", "", true},
		{"tcg", "garbage", true},
		{"kvm", "7.2.22", false},
		{"kvm", "", false},
	} {
		if got := LiveMigrationLosesWrites(tc.accel, tc.version); got != tc.want {
			t.Errorf("LiveMigrationLosesWrites(%q, %q) = %v, want %v", tc.accel, tc.version, got, tc.want)
		}
	}
}
