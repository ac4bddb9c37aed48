package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/digitalocean/go-libvirt"
)

// libvirtMode starts domains with DomainCreateXML on the libvirtStack (transient domains, as
// KubeVirt's virt-launcher creates them).
type libvirtMode struct {
	s   *libvirtStack
	dir string // per-VM folders (console socket, serial log, agent socket)
}

func (m *libvirtMode) name() string { return modeLibvirt }

type libvirtPending struct {
	m   *libvirtMode
	g   Guest
	xml string
}

type libvirtVM struct {
	m    *libvirtMode
	g    Guest
	dom  libvirt.Domain
	qemu int
}

// guestFor fills in g's per-VM socket paths for libvirt and bare QEMU, in dir/NAME (owned by
// nobody: QEMU creates the sockets there).
func guestFor(g Guest, dir string) (Guest, error) {
	vmDir := filepath.Join(dir, g.Name)
	if err := mkdirNobody(vmDir); err != nil {
		return g, err
	}
	g.ConsoleSocket = filepath.Join(vmDir, "console.sock")
	g.ConsoleLog = filepath.Join(vmDir, "serial.log")
	g.AgentSocket = filepath.Join(vmDir, "qga.sock")
	g.QMPSocket = filepath.Join(vmDir, "qmp.sock")
	return g, nil
}

func (m *libvirtMode) prepare(ctx context.Context, g Guest) (pending, error) {
	g, err := guestFor(g, m.dir)
	if err != nil {
		return nil, err
	}
	x, err := DomainXML(g)
	if err != nil {
		return nil, err
	}
	return &libvirtPending{m: m, g: g, xml: x}, nil
}

// start is DomainCreateXML: it returns once QEMU runs the guest.
func (p *libvirtPending) start(ctx context.Context) (vm, error) {
	l := p.m.s.conn
	var dom libvirt.Domain
	err := lvDo(ctx, l, "create domain", func() (err error) { dom, err = l.DomainCreateXML(p.xml, libvirt.DomainNone); return err })
	if err != nil {
		return nil, fmt.Errorf("%w (qemu log %s)", err, p.m.s.QEMULog(p.g.Name))
	}
	v := &libvirtVM{m: p.m, g: p.g, dom: dom}
	v.qemu, _ = qemuPID(p.g.Name) // only the memory report needs it; it re-checks
	return v, nil
}

func (p *libvirtPending) discard(context.Context) error { return nil }

func (v *libvirtVM) console() string { return v.g.ConsoleSocket }

// pause is DomainSuspend (QMP stop, then libvirt waits for the STOP event and updates its state).
func (v *libvirtVM) pause(ctx context.Context) error {
	l := v.m.s.conn
	return lvDo(ctx, l, "suspend domain", func() error { return l.DomainSuspend(v.dom) })
}

// resume is DomainResume (QMP cont).
func (v *libvirtVM) resume(ctx context.Context) error {
	l := v.m.s.conn
	return lvDo(ctx, l, "resume domain", func() error { return l.DomainResume(v.dom) })
}

func (v *libvirtVM) state(ctx context.Context) error {
	l := v.m.s.conn
	return lvDo(ctx, l, "get domain state", func() error { _, _, err := l.DomainGetState(v.dom, 0); return err })
}

func (v *libvirtVM) qemuPID() int {
	if v.qemu == 0 {
		v.qemu, _ = qemuPID(v.g.Name) // 0 stays 0: the memory report then fails with the reason
	}
	return v.qemu
}

func (v *libvirtVM) controlPIDs() []int { return nil }

// stop is DomainDestroy (SIGTERM, then SIGKILL after a grace period; libvirt waits for QEMU).
func (v *libvirtVM) stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	l := v.m.s.conn
	pid := v.qemuPID()
	if err := lvDo(ctx, l, "destroy domain", func() error { return l.DomainDestroy(v.dom) }); err != nil {
		return err
	}
	if pid > 0 {
		return waitPidGone(ctx, pid)
	}
	return nil
}
