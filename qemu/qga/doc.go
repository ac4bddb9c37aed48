// Package qga is vmlet's client for the QEMU guest agent (qemu-ga) over the host side of its
// virtio-serial port: the unix socket QEMU serves for the org.qemu.guest_agent.0 chardev.
//
// It owns the agent's wire protocol, which differs from QMP: no greeting, no events, one request
// at a time, and a channel that outlives the agent (the guest may reboot or the agent restart
// while the socket stays open, so stale replies can sit in the stream). The client therefore:
//   - synchronises before its first request and after any timeout, cancellation or undecodable
//     input: it writes a 0xFF byte (which resets the agent's JSON parser; the agent answers it
//     with a parse error) and guest-sync-delimited with a fresh random id, then discards
//     everything up to the 0xFF the agent puts before the sync reply, and sync replies with
//     other ids;
//   - puts a random id on every command and drops replies carrying any other id, so a reply
//     to a command that already timed out is never taken for the answer to a new one;
//   - serializes requests, first come first served (qemu-ga is single-threaded and answers in
//     order), and bounds the two waits separately: the wait in line for the channel by
//     Options.QueueTimeout (ErrBusy: never sent, says nothing about the agent), and the
//     request itself, from when it is sent, by Options.DefaultTimeout or a per-command override
//     (ErrTimeout: sent and unanswered, resync follows); a sooner context deadline bounds both;
//   - does not wait for replies to commands that send none on success (guest-shutdown,
//     guest-suspend-*).
//
// Typed wrappers cover what vmlet reads from guests (guest-ping, guest-info, guest-get-osinfo,
// guest-network-get-interfaces, guest-get-users, guest-get-fsinfo, guest-exec and
// guest-exec-status, guest-shutdown); Execute runs anything else. guest-exec is asynchronous in
// qemu-ga: Wait and Run poll guest-exec-status with short requests, so a long guest process
// never holds the channel (ErrStillRunning when the wait ends first; qemu-ga cannot kill it).
// Errors reuse package qmp's types: a QMP-style error reply is a *qmp.Error (alias Error) with
// its class, timeouts wrap ErrTimeout and a gone connection ErrDisconnected. The scripted fake agent for unit tests is
// the sibling package qgatest.
package qga
