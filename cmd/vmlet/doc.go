// Command vmlet runs the node agent (vmlet agent), the cluster controller (vmlet controller) and
// the single-machine local mode (vmlet local). Flag parsing and wiring only; the logic lives in
// controllers/ and the host packages.
package main
