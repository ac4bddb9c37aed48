// Package relay copies byte streams between two kinds of sockets: it accepts connections on
// one listener and, for each, dials a peer and copies both ways until either side ends.
//
// The node agents use it for live migration the way KubeVirt's virt-handler migration proxy
// does: QEMU on the source connects to a unix socket in its launcher's run folder, the source
// agent relays that connection over TCP between the node addresses to the target node's agent,
// which relays it into the target launcher's unix socket. QEMU never needs a network of its
// own, the launcher sockets never leave their run folders, and the stream's content is
// untouched. Between the nodes the agents speak TLS (their listener a TLS listener, their dial
// a TLS client): an accepted TLS connection is relayed only once its handshake succeeded, so a
// peer without a valid certificate never reaches QEMU.
//
// The package takes plain listeners and dial functions; it imports no Kubernetes types.
package relay
