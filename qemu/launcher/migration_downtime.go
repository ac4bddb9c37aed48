package launcher

import (
	"context"
	"time"

	"github.com/vmlet/vmlet/qemu"
)

// downtimeStepPasses is how many passes over guest memory a migration makes at one downtime
// limit before the limit is doubled (MigrationOptions.max_downtime_ms).
const downtimeStepPasses = 3

// downtimeSetTimeout bounds one migrate-set-parameters of raiseDowntime.
const downtimeSetTimeout = 5 * time.Second

// downtimeLimit is the downtime limit after passes passes over guest memory: first, doubled
// every downtimeStepPasses passes (the first pass copies all of memory and is not counted),
// never above max (pure).
func downtimeLimit(passes int64, first, max time.Duration) time.Duration {
	if first <= 0 || max <= first {
		return first
	}
	d := first
	for steps := (passes - 1) / downtimeStepPasses; steps > 0 && d < max; steps-- {
		d *= 2
	}
	return min(d, max)
}

// raiseDowntime follows d's outgoing migration and raises its downtime limit from first
// towards max as downtimeLimit says, until the migration ends (completed, failed, cancelled)
// or QEMU is gone. QMP: migrate-set-parameters downtime-limit.
func (l *api) raiseDowntime(d *domain, first, max time.Duration) {
	if max <= first {
		return
	}
	passes := make(chan int64, 1) // the latest pass count; the watcher never waits for the setter
	done := make(chan struct{})
	go func() {
		defer close(done)
		cur := first
		for p := range passes {
			want := downtimeLimit(p, first, max)
			if want <= cur {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), downtimeSetTimeout)
			err := d.vm.SetMigrationParams(ctx, qemu.MigrationParams{DowntimeLimit: want})
			cancel()
			if err != nil {
				l.log.Info("raise the migration downtime limit", "to", want, "err", err)
				continue
			}
			l.log.Info("migration downtime limit raised", "passes", p, "to", want)
			cur = want
		}
	}()
	_, _ = d.vm.WaitMigration(context.Background(), func(mi qemu.MigrationInfo) {
		select {
		case <-passes: // replaced by the newer count
		default:
		}
		passes <- mi.DirtySyncCount
	})
	close(passes)
	<-done
}
