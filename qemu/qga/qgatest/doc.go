// Package qgatest is a scripted fake QEMU guest agent for unit tests of code that talks to
// qemu-ga. It speaks the agent's side of the wire: newline-delimited JSON requests, a 0xFF byte
// that resets the parser (answered, like qemu-ga, with an id-less parse error),
// guest-sync-delimited answered with 0xFF before the reply, ids echoed. It can go silent and
// come back (Hold/Release: requests written meanwhile are answered late, in order, as by an
// agent that restarts), inject raw bytes (stale replies, garbage), and it records every
// request. It deliberately does not import package qga.
//
//	ag := qgatest.New(qgatest.Options{})
//	t.Cleanup(func() { ag.Close() })
//	ag.Handle("guest-get-osinfo", func(json.RawMessage) (any, *qgatest.Error) {
//		return map[string]string{"id": "debian"}, nil
//	})
//	conn := ag.Pipe()
package qgatest
