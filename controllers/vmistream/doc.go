// Package vmistream is the node agent's side of the subresources API (issue #17): an HTTPS
// server, reachable only with the aggregated API server's client certificate (mTLS), that
// relays one VMI's streams and calls to its launcher on this node — the serial console and
// VNC sockets (opened without following symlinks, package nofollow), the launcher's gRPC calls
// (guest info, QMP with the caller's name, the QMP log, screenshots) and TCP to a guest port.
//
// The aggregated server (package subresources) authenticates and authorizes the user and
// forwards the request here with who the user is (HeaderCaller) and which QMP commands they
// may run (HeaderQMPAllow); this server enforces the allow-list, records each QMP command as
// an Event on the VMI and keeps one console and one VNC client per VMI: a new one takes over
// and the old one's websocket is closed with CloseTakenOver.
package vmistream
