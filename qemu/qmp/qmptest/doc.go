// Package qmptest is a scripted fake QMP peer (a stand-in for QEMU's monitor socket) for unit
// tests of code that speaks QMP. It plays QEMU's side of the protocol: it sends the greeting,
// enforces and answers qmp_capabilities, then answers each command from a script of rules
// (matched by command name and optionally arguments), echoing the command's id like QEMU. It can
// hold replies back (to produce out-of-order replies), emit events on demand, send raw lines,
// drop the connection mid-stream, and it records every command received, including file
// descriptors passed with SCM_RIGHTS over a unix socket.
//
// It deliberately does not import package qmp: the client is tested against an independent
// implementation of the wire format.
//
//	srv := qmptest.NewServer(qmptest.Options{})
//	t.Cleanup(func() { srv.Close() })
//	srv.On("query-status").Return(map[string]any{"status": "running", "running": true})
//	conn := srv.Pipe() // or srv.Listen(path) and dial it
package qmptest
