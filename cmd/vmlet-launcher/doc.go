// Command vmlet-launcher is the per-VM launcher: it owns one QEMU process through the qemu
// driver and serves the launcher API on a unix socket. Wiring only; it links no k8s.io package.
package main
