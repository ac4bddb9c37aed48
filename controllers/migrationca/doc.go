// Package migrationca keeps cluster mode's migration CA in a Secret (package casecret): `vmlet
// controller` makes it once (EnsureCA) and node agents read it (ReadCA) to issue their node's
// certificate (package pki), which the agents' migration relays present to each other: the
// memory stream and the NBD disk copy travel over TLS between the nodes, in plaintext only over
// the unix socket between a node's agent and its own QEMU. Local mode keeps its CA in files
// under its state folder instead (pki.LoadOrCreateCA).
//
// Every node agent can read the CA's key (a Secret in vmlet-system; the agents' role may get
// Secrets): a node can mint a certificate for any node name and address. Node agents run as root
// on their nodes with every VM's disks at hand, so this adds little; per-node certificates
// minted by the controller would close it (README, Not yet).
package migrationca
