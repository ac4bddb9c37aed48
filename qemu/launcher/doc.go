// Package launcher is the per-VM launcher runtime: its command server and versioned API, the
// client the node agent uses, the event stream, and the QMP log and debug proxy.
package launcher
