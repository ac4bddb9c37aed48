// Command vmlet-dhcp6c is the test guest's DHCPv6 client (busybox-static in Debian has no
// udhcpc6). build.sh compiles it statically (CGO_ENABLED=0) into the initramfs, and the guest's
// /init starts it in the background on every eth* interface it brings up.
//
// It waits for the interface's link-local address to pass duplicate address detection, asks
// for one address (IA_NA: SOLICIT/ADVERTISE/REQUEST/REPLY), adds it as a /128 with the lease's
// lifetimes (the on-link prefix and the default route come from router advertisements, which
// the guest kernel processes itself), waits for its DAD and prints the console marker
//
//	VMLET-IP6 <iface> <addr>
//
// It renews at T1 or on SIGUSR1 and prints the marker again after every successful renewal.
// When no server answers within -wait (an IPv4-only pod network) it exits with status 1 and a
// message on stderr, leaving the console alone.
//
// Equivalent to: `dhclient -6 -1 IFACE` with a script that adds the address and prints the marker.
package main
