package dhcp

import "errors"

// Sentinel errors. Match them with errors.Is.
var (
	// ErrClosed: the DHCP server was closed.
	ErrClosed = errors.New("closed")
	// ErrInvalidSockets: sockets that do not fit the lease plan (count or kind).
	ErrInvalidSockets = errors.New("invalid dhcp sockets")
	// ErrNoIPv6: the lease plan has no IPv6.
	ErrNoIPv6 = errors.New("no ipv6 in the lease plan")
)
