package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/qemu/qga"
)

// migrationMemMiB is the guest size of the migration phase.
const migrationMemMiB = 1024

// migrationBandwidth is the max-bandwidth both modes use: the launcher's default when the
// caller sets none ("unlimited"), set explicitly on bare QEMU (QEMU's own default is 128 MiB/s).
const migrationBandwidth = 10 << 30

// dirtyCmd makes the guest rewrite 16 MiB of tmpfs with random data in a loop (≈145 MB/s under
// TCG here; random so that pages do not compress to zero pages), detached from guest-exec.
const dirtyCmd = "head -c 16m /dev/urandom > /tmp/src && cp /tmp/src /tmp/dirty && " +
	"(while :; do dd if=/tmp/src of=/tmp/dirty bs=1M conv=notrunc 2>/dev/null; done) </dev/null >/dev/null 2>&1 &"

// migResult is one migration: QEMU's own total-time and downtime (source's query-migrate),
// the wall time from the migrate request until the target runs the guest, and the bytes sent.
type migResult struct {
	total, downtime, wall time.Duration
	transferred           int64
}

// migrator moves one booted guest from QEMU to a fresh QEMU on this host, round after round
// (each target becomes the next source, so the guest boots once).
type migrator interface {
	name() string
	migrate(ctx context.Context, round int) (migResult, error)
	startDirtying(ctx context.Context) error
	stop(ctx context.Context) error
}

// phaseMigrate boots a 1 GiB migratable guest per mode and migrates it rounds times idle, then
// starts the dirtying loop in it and migrates it rounds times again; modes alternate.
// libvirt is left out: libvirt refuses to migrate a domain to the same host (its
// "Attempt to migrate guest to the same host" check compares host UUIDs), and a second host is
// not available here.
func (b *bench) phaseMigrate(ctx context.Context) error {
	vm1, err := b.bootVmletMig(ctx)
	if err != nil {
		return err
	}
	defer func() { b.cleanupErr(vm1.stop(context.WithoutCancel(ctx))) }()
	bm, err := b.bootBareMig(ctx)
	if err != nil {
		return err
	}
	defer func() { b.cleanupErr(bm.stop(context.WithoutCancel(ctx))) }()
	modes := []migrator{vm1, bm}
	round := 0
	for _, workload := range []string{"idle", "dirtying"} {
		if workload == "dirtying" {
			for _, m := range modes {
				if err := m.startDirtying(ctx); err != nil {
					return fmt.Errorf("start dirtying in %s guest: %w", m.name(), err)
				}
			}
		}
		total, down, wall, sent := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
		for r := range b.rounds {
			for _, i := range RoundOrder(len(modes), r) {
				m := modes[i]
				round++
				res, err := m.migrate(ctx, round)
				if err != nil {
					return fmt.Errorf("migrate %s (%s, round %d): %w", m.name(), workload, r+1, err)
				}
				total[m.name()] = append(total[m.name()], ms(res.total))
				down[m.name()] = append(down[m.name()], ms(res.downtime))
				wall[m.name()] = append(wall[m.name()], ms(res.wall))
				sent[m.name()] = append(sent[m.name()], float64(res.transferred)/mib)
				b.progress("migrate", r, "%s %-5s total %6.0f ms  downtime %5.0f ms  request→target running %6.0f ms  sent %5.0f MiB",
					workload, m.name(), ms(res.total), ms(res.downtime), ms(res.wall), float64(res.transferred)/mib)
			}
		}
		names := []string{modeVmlet, modeBare}
		method := fmt.Sprintf("A %d MiB guest (migratable: qemu64 CPU, versioned q35), %s, migrated over a unix socket to a fresh QEMU on this host, "+
			"%d rounds, modes alternating; max-bandwidth %d GiB/s, QEMU's default downtime limit (300 ms). "+
			"vmlet: target launcher PrepareMigrationTarget, source Migrate RPC, FinalizeMigration on both. "+
			"bare: raw QMP migrate-incoming / migrate, MIGRATION and RESUME events.", migrationMemMiB, workload, b.rounds, migrationBandwidth>>30)
		b.res.Comparisons = append(b.res.Comparisons,
			newComparison("migration-"+workload+"-total", "Migration 1 GiB, "+workload+": QEMU total-time", "ms", "round", method, names, total),
			newComparison("migration-"+workload+"-downtime", "Migration 1 GiB, "+workload+": QEMU downtime", "ms", "round", method, names, down),
			newComparison("migration-"+workload+"-wall", "Migration 1 GiB, "+workload+": migrate request → target running", "ms", "round", method, names, wall),
			newComparison("migration-"+workload+"-sent", "Migration 1 GiB, "+workload+": RAM transferred", "MiB", "round", method, names, sent),
		)
	}
	return nil
}

// ---- vmlet ---------------------------------------------------------------------------------

type vmletMig struct {
	b   *bench
	src *launcherProc
	dom string
}

func (m *vmletMig) name() string { return modeVmlet }

func (b *bench) bootVmletMig(ctx context.Context) (*vmletMig, error) {
	g := b.guest("sbs-mig-vmlet")
	g.MemoryMiB = migrationMemMiB
	spec := g.LauncherSpec()
	spec.Migratable = true
	spec.Cpu.Model = "" // the launcher's migratable defaults: qemu64 and the versioned q35,
	spec.Machine = ""   // as bare QEMU's (bareOptions.migratable)
	p, err := b.vmlet.spawn(ctx, "l-"+g.Name+"-0", g.Name, spec)
	if err != nil {
		return nil, err
	}
	if _, err := p.start(ctx); err != nil {
		return nil, undone(err, "stop", p.stop(ctx))
	}
	bctx, cancel := context.WithTimeout(ctx, bootTimeout)
	defer cancel()
	if err := waitMarker(bctx, p.console(), marker); err != nil {
		return nil, undone(err, "stop", p.stop(ctx))
	}
	return &vmletMig{b: b, src: p, dom: g.Name}, nil
}

func (m *vmletMig) migrate(ctx context.Context, round int) (migResult, error) {
	var res migResult
	d, err := m.src.client.GetDomain(ctx)
	if err != nil {
		return res, err
	}
	dst, err := m.b.vmlet.spawn(ctx, fmt.Sprintf("l-%s-%d", m.dom, round), m.dom, d.GetLiveSpec())
	if err != nil {
		return res, err
	}
	ok := false
	defer func() {
		if !ok {
			m.b.cleanupErr(dst.stop(context.WithoutCancel(ctx)))
		}
	}()
	opts := &pb.MigrationOptions{} // the launcher's defaults: unlimited bandwidth, QEMU's downtime limit
	uri, err := dst.client.PrepareMigrationTarget(ctx, d.GetLiveSpec(), "", opts)
	if err != nil {
		return res, err
	}
	if td, err := dst.client.GetDomain(ctx); err == nil {
		dst.qemu = int(td.GetPid())
	}
	t0 := time.Now()
	if err := m.src.client.Migrate(ctx, uri, opts); err != nil {
		return res, err
	}
	if _, err := dst.client.FinalizeMigration(ctx, 0); err != nil {
		return res, err
	}
	res.wall = time.Since(t0)
	st, err := m.src.client.FinalizeMigration(ctx, 0)
	if err != nil {
		return res, err
	}
	if st.GetStatus() != "completed" {
		return res, fmt.Errorf("migration ended %s: %s", st.GetStatus(), st.GetError())
	}
	res.total = time.Duration(st.GetTotalTimeMs()) * time.Millisecond
	res.downtime = time.Duration(st.GetDowntimeMs()) * time.Millisecond
	res.transferred = int64(st.GetTransferredBytes())
	if err := m.src.stop(ctx); err != nil { // the source launcher exits by itself ("migrated")
		return res, err
	}
	m.src, ok = dst, true
	return res, nil
}

func (m *vmletMig) startDirtying(ctx context.Context) error {
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for { // the launcher connects to the agent with a back-off; wait for it
		d, err := m.src.client.GetDomain(actx)
		if err != nil {
			return err
		}
		if d.GetAgentConnected() {
			break
		}
		select {
		case <-actx.Done():
			return fmt.Errorf("wait for guest agent: %w", actx.Err())
		case <-tick.C:
		}
	}
	r, err := m.src.client.GuestExec(actx, "/bin/sh", []string{"-c", dirtyCmd}, nil, 0)
	if err != nil {
		return err
	}
	if r.GetExitCode() != 0 {
		return fmt.Errorf("guest exec: exit %d: %s", r.GetExitCode(), r.GetStderr())
	}
	return nil
}

func (m *vmletMig) stop(ctx context.Context) error { return m.src.stop(ctx) }

// ---- bare ----------------------------------------------------------------------------------

type bareMig struct {
	b    *bench
	src  *bareVM
	base Guest
}

func (m *bareMig) name() string { return modeBare }

func (b *bench) bootBareMig(ctx context.Context) (*bareMig, error) {
	g := b.guest("sbs-mig-bare")
	g.MemoryMiB = migrationMemMiB
	g.Machine = "" // the versioned q35 (bareMode.machine), as the launcher picks it
	m := &bareMig{b: b, base: g}
	g.Name += "-0"
	p, err := b.bare.prepareWith(g, bareOptions{migratable: true})
	if err != nil {
		return nil, err
	}
	v, err := p.startBare(ctx, "running")
	if err != nil {
		return nil, err
	}
	bctx, cancel := context.WithTimeout(ctx, bootTimeout)
	defer cancel()
	if err := waitMarker(bctx, v.console(), marker); err != nil {
		return nil, undone(err, "stop", v.stop(ctx))
	}
	m.src = v
	return m, nil
}

func (m *bareMig) migrate(ctx context.Context, round int) (migResult, error) {
	var res migResult
	g := m.base
	g.Name = fmt.Sprintf("%s-%d", g.Name, round)
	p, err := m.b.bare.prepareWith(g, bareOptions{migratable: true, incoming: true})
	if err != nil {
		return res, err
	}
	dst, err := p.startBare(ctx, "inmigrate")
	if err != nil {
		return res, err
	}
	ok := false
	defer func() {
		if !ok {
			m.b.cleanupErr(dst.stop(context.WithoutCancel(ctx)))
		}
	}()
	events := map[string]any{"capabilities": []map[string]any{{"capability": "events", "state": true}}}
	for _, q := range []*rawQMP{m.src.qmp, dst.qmp} {
		if _, err := q.run(ctx, "migrate-set-capabilities", events); err != nil {
			return res, err
		}
	}
	if _, err := m.src.qmp.run(ctx, "migrate-set-parameters", map[string]any{"max-bandwidth": migrationBandwidth}); err != nil {
		return res, err
	}
	uri := "unix:" + filepath.Join(filepath.Dir(dst.g.QMPSocket), "mig.sock")
	if _, err := dst.qmp.run(ctx, "migrate-incoming", map[string]any{"uri": uri}); err != nil {
		return res, err
	}
	sFrom, dFrom := m.src.qmp.eventCount(), dst.qmp.eventCount()
	t0 := time.Now()
	if _, err := m.src.qmp.run(ctx, "migrate", map[string]any{"uri": uri}); err != nil {
		return res, err
	}
	var final string
	if _, err := m.src.qmp.waitEvent(ctx, sFrom, "MIGRATION", func(d json.RawMessage) bool {
		var e struct {
			Status string `json:"status"`
		}
		_ = json.Unmarshal(d, &e) // an undecodable event does not match
		final = e.Status
		return e.Status == "completed" || e.Status == "failed" || e.Status == "cancelled"
	}); err != nil {
		return res, err
	}
	if final != "completed" {
		return res, fmt.Errorf("migration ended %s", final)
	}
	if _, err := dst.qmp.waitEvent(ctx, dFrom, "RESUME", nil); err != nil {
		return res, err
	}
	res.wall = time.Since(t0)
	info, err := m.src.qmp.completedInfo(ctx)
	if err != nil {
		return res, err
	}
	res.total = time.Duration(info.TotalTime) * time.Millisecond
	res.downtime = time.Duration(info.Downtime) * time.Millisecond
	res.transferred = info.RAM.Transferred
	if err := m.src.stop(ctx); err != nil {
		return res, err
	}
	m.src, ok = dst, true
	return res, nil
}

func (m *bareMig) startDirtying(ctx context.Context) error {
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	a, err := qga.Dial(actx, m.src.g.AgentSocket, qga.Options{})
	if err != nil {
		return err
	}
	defer a.Close()
	st, err := a.Run(actx, "/bin/sh", "-c", dirtyCmd)
	if err != nil {
		return err
	}
	if st.ExitCode != 0 {
		return fmt.Errorf("guest exec: exit %d: %s", st.ExitCode, st.Stderr)
	}
	return nil
}

func (m *bareMig) stop(ctx context.Context) error { return m.src.stop(ctx) }
