package launcher

import (
	"testing"
	"time"
)

func TestDowntimeLimit(t *testing.T) {
	const ms = time.Millisecond
	for _, c := range []struct {
		passes     int64
		first, max time.Duration
		want       time.Duration
	}{
		{0, 50 * ms, 300 * ms, 50 * ms},
		{1, 50 * ms, 300 * ms, 50 * ms}, // the first pass copies all of memory
		{3, 50 * ms, 300 * ms, 50 * ms},
		{4, 50 * ms, 300 * ms, 100 * ms},
		{6, 50 * ms, 300 * ms, 100 * ms},
		{7, 50 * ms, 300 * ms, 200 * ms},
		{10, 50 * ms, 300 * ms, 300 * ms}, // 400 capped
		{1000, 50 * ms, 300 * ms, 300 * ms},
		{10, 50 * ms, 0, 50 * ms},       // no max: the first limit throughout
		{10, 50 * ms, 50 * ms, 50 * ms}, // max not above first
		{10, 0, 300 * ms, 0},            // QEMU's default limit: left alone
	} {
		if got := downtimeLimit(c.passes, c.first, c.max); got != c.want {
			t.Errorf("downtimeLimit(%d, %s, %s) = %s, want %s", c.passes, c.first, c.max, got, c.want)
		}
	}
}
