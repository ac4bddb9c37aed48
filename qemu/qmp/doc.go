// Package qmp is vmlet's client for the QEMU Machine Protocol (QMP) over a unix socket.
//
// It owns the wire protocol and nothing above it: the greeting and qmp_capabilities handshake,
// command ids and reply matching, per-command deadlines, SCM_RIGHTS file passing (getfd, add-fd),
// event fan-out to subscribers, and the connection's lifetime. Typed wrappers for individual QMP
// commands live with their callers in package qemu.
//
// Design, and why it differs from go-qemu's SocketMonitor:
//   - one reader goroutine decodes lines of any length (no 64 KiB cap: query-qmp-schema is
//     ≈200 KiB on QEMU 7.2) and routes replies by the "id" the client put on every command;
//   - every Execute has a deadline: the sooner of its context's and Options.DefaultTimeout (or a
//     per-command override); a reply that arrives after its caller gave up is discarded;
//   - each subscriber has its own unbounded queue: a slow or absent event reader never blocks
//     command replies and never loses events;
//   - QMP errors keep their class (*Error{Class, Desc}); lost connections surface as
//     ErrDisconnected on every pending and later call, and on Done/Err.
//
// To observe an event caused by a command, subscribe before sending it (an event may arrive
// before the command's reply):
//
//	w := m.Expect(qmp.EventNamed("STOP"))
//	defer w.Cancel()
//	if err := m.Execute(ctx, "stop", nil, nil); err != nil { ... }
//	ev, err := w.Wait(ctx)
//
// or use ExecuteAndWait, which does exactly that.
//
// GoQEMU adapts a Monitor to go-qemu's qmp.Monitor interface so go-qemu's qemu.Domain can run on
// top of this client. The scripted fake peer for unit tests is the sibling package qmptest.
package qmp
